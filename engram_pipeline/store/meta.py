"""The meta table: the schema version and the embedder a store was created with, checked at every open."""

from __future__ import annotations

from typing import Any

from engram_pipeline.model import META_SCHEMA, SCHEMA_VERSION, rows_to_table
from engram_pipeline.store.cas import _with_retry
from engram_pipeline.store.errors import EmbedderMismatch, InvalidInput


def check_meta(table: Any, *, uri: str, embedder: str, dimension: int) -> None:
    """Record the embedder of a new store; refuse to open one made with another embedder or schema version."""
    rows = {r["key"]: r["value"] for r in table.to_arrow().to_pylist()}
    if "embedder" not in rows:
        first = rows_to_table(
            [
                {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                {"key": "embedder", "value": embedder},
                {"key": "dimension", "value": str(dimension)},
            ],
            META_SCHEMA,
        )
        _with_retry(lambda: table.merge_insert("key").when_not_matched_insert_all().execute(first))
        rows = {r["key"]: r["value"] for r in table.to_arrow().to_pylist()}
    if rows["embedder"] != embedder or int(rows["dimension"]) != dimension:
        raise EmbedderMismatch(uri, rows["embedder"], int(rows["dimension"]), embedder, dimension)
    if int(rows.get("schema_version", SCHEMA_VERSION)) != SCHEMA_VERSION:
        raise InvalidInput(
            f"the store at {uri} has schema version {rows['schema_version']}; "
            f"this release reads version {SCHEMA_VERSION}"
        )
