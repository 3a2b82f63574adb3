"""The meta table: the schema version, the embedder and the shard count a store was created with, checked at
every open, and the state of a re-shard under way (:mod:`engram_pipeline.store.migrate`).

A store created before shards were recorded has no ``shards`` key: it has one shard (today's table names).
"""

from __future__ import annotations

import json
from typing import Any

from engram_pipeline.embed import embedder_settings
from engram_pipeline.model import META_SCHEMA, SCHEMA_VERSION, rows_to_table
from engram_pipeline.store.errors import EmbedderMismatch, InvalidInput, MigrationInProgress, ShardCountMismatch
from engram_pipeline.store.retry import with_retry

SHARDS = "shards"  # the shard count the store's tables are laid out for
MIGRATION = "migration"  # JSON of a re-shard under way: {"from": N, "to": M, "done": [target shards copied]}


def check_meta(table: Any, *, uri: str, embedder: str, dimension: int, shards: int, migrating: bool = False) -> int:
    """Record the embedder and shard count of a new store; refuse to open one made with another embedder,
    schema version or shard count, or one a migration left half-way (unless ``migrating``: the migration
    itself). Returns the store's recorded shard count."""
    rows = read_meta(table)
    if "embedder" not in rows:
        first = rows_to_table(
            [
                {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                {"key": "embedder", "value": embedder},
                {"key": "dimension", "value": str(dimension)},
                {"key": SHARDS, "value": str(shards)},
            ],
            META_SCHEMA,
        )
        with_retry(lambda: table.merge_insert("key").when_not_matched_insert_all().execute(first))
        rows = read_meta(table)
    if rows["embedder"] != embedder or int(rows["dimension"]) != dimension:
        built, built_dim = rows["embedder"], int(rows["dimension"])
        select = embedder_settings(built, built_dim)
        raise EmbedderMismatch(uri, built, built_dim, embedder, dimension, select=select)
    if int(rows.get("schema_version", SCHEMA_VERSION)) != SCHEMA_VERSION:
        raise InvalidInput(
            f"the store at {uri} has schema version {rows['schema_version']}; "
            f"this release reads version {SCHEMA_VERSION}"
        )
    stored = int(rows.get(SHARDS, 1))
    if migrating:
        return stored
    if rows.get(MIGRATION):
        state = json.loads(rows[MIGRATION])
        raise MigrationInProgress(uri, source=int(state["from"]), target=int(state["to"]))
    if stored != shards:
        raise ShardCountMismatch(uri, stored=stored, given=shards)
    return stored


def read_meta(table: Any) -> dict[str, str]:
    """The meta table as ``{key: value}`` (strong read consistency: a fresh read)."""
    return {r["key"]: r["value"] for r in table.to_arrow().to_pylist() if r["value"] is not None}


def write_meta(table: Any, values: dict[str, str | None]) -> None:
    """Set (or, with None, clear) meta keys in one commit."""
    rows = rows_to_table([{"key": k, "value": v} for k, v in values.items()], META_SCHEMA)
    with_retry(lambda: table.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(rows))
