"""Re-shard a store (``engram migrate --shards N``): copy every table into the layout of ``N`` shards, resumably.

The store's tables are laid out for the shard count recorded in ``meta`` (:mod:`engram_pipeline.store.shards`).
A migration to ``N``:

1. records ``migration = {"from": M, "to": N, "done": []}`` in ``meta``. From this commit on, every open of
   the store is refused with :class:`~engram_pipeline.store.errors.MigrationInProgress` (whatever
   ``ENGRAM_SHARDS`` says), so nothing writes to either layout;
2. when no target shard is ``done`` yet, records every source table's version (``versions``): the state the
   copy starts from;
3. for each target shard not yet ``done``: each of its six tables is written whole from the source tables
   (every row whose agent hashes to it; a lease row by the agent its key names), replacing any table of that
   name (a killed copy of this shard is simply done again), then the shard is added to ``done``;
4. checks that no source table moved since step 2 (a process that opened the store before the migration
   began could still write to it: then the copy is thrown away, ``done`` emptied, and the run refuses with a
   message to stop the writers and run again; the next run records the versions it starts from, so writes
   made before every writer stopped do not refuse it again), and records ``shards = N`` with the migration
   cleared, in one commit: the switch;
5. drops the tables of every other layout (the source's, and any an earlier migration killed after its
   switch left behind).

Killed anywhere, the next ``engram migrate --shards N`` resumes at the first target shard not done; before the
switch the source tables are untouched, after it they are only garbage, which any later ``engram migrate``
drops (to the store's current count too, which changes nothing else). Rows are copied as they are (every
column, ``version`` included); the new ``memories`` tables are made with stable row ids
(:func:`~engram_pipeline.store.shards.create_memories`, so a store made before them gets them) and get
their BTree indexes, and the vector index is left to maintenance (``engram maintain``). Cost: each source
table is read once per target shard (one source table in memory at a time).

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> import tempfile
>>> uri = tempfile.mkdtemp()
>>> _ = MemoryStore.open(uri, settings=Settings().replace(embedder="hashing")).remember("alice", "Tea at five")
>>> report = migrate(uri, shards=4, settings=Settings().replace(embedder="hashing"))
>>> report.source, report.target, report.rows["memories"]
(1, 4, 1)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from lancedb.index import BTree

from engram_pipeline.embed import Embedder
from engram_pipeline.settings import Settings
from engram_pipeline.store.core import ShardedEngine
from engram_pipeline.store.cursors import lease_agent
from engram_pipeline.store.errors import InvalidInput, StoreError
from engram_pipeline.store.maintenance import SCALAR_INDEXES, TABLES
from engram_pipeline.store.meta import MIGRATION, SHARDS, read_meta, write_meta
from engram_pipeline.store.sharding import is_shard_scope, shard_of
from engram_pipeline.store.shards import create_memories, open_table, schemas, table_name


@dataclass(frozen=True)
class MigrationReport:
    source: int  # the shard count before
    target: int  # the shard count now
    rows: dict[str, int]  # rows in each kind of table (memories, links, ...) after, over all shards
    copied: tuple[int, ...]  # target shards this run copied (the others a killed run had done)
    resumed: bool  # whether this run finished a migration an earlier run began
    dropped: tuple[str, ...] = ()  # the tables of other layouts this run dropped


def migrate(
    uri: str,
    *,
    shards: int,
    settings: Settings,
    embedder: Embedder | None = None,
    storage_options: dict[str, str] | None = None,
    after_shard: Callable[[int], None] | None = None,
    after_drop: Callable[[str], None] | None = None,
) -> MigrationReport:
    """Re-shard the store at ``uri`` into ``shards`` shards; see the module. ``after_shard(k)`` is called once
    target shard ``k`` is copied and recorded, ``after_drop(name)`` once a table of another layout is dropped
    (tests kill the run there)."""
    if shards < 1:
        raise InvalidInput(f"a store has at least one shard, not {shards}")
    store = ShardedEngine.open(
        uri, settings=settings, embedder=embedder, storage_options=storage_options, create=False, migrating=True
    )
    meta = read_meta(store.meta)
    source = int(meta.get(SHARDS, 1))
    state = json.loads(meta[MIGRATION]) if meta.get(MIGRATION) else None
    resumed = state is not None
    if state is None:
        if shards == source:
            dropped = _drop_other_layouts(store.db, source, after_drop)
            return MigrationReport(source, source, _counts(store.db, source), (), False, dropped)
        state = {"from": source, "to": shards, "done": []}
        write_meta(store.meta, {MIGRATION: json.dumps(state)})
    elif int(state["to"]) != shards:
        raise StoreError(
            f"the store at {store.uri} is being re-sharded from {state['from']} to {state['to']} shard(s); "
            f"finish that first (`engram migrate --shards {state['to']}`), then migrate again"
        )
    db, memory_schema = store.db, store.memory_schema
    if not state["done"]:  # the copy starts (again) here: it is judged on the state it copies from now on
        state["versions"] = _versions(db, source)
        write_meta(store.meta, {MIGRATION: json.dumps(state)})
    copied = []
    for k in range(shards):
        if k in state["done"]:
            continue
        for base, schema in schemas(memory_schema).items():
            _copy(db, base, schema, source=source, target=shards, shard=k)
        state["done"] = sorted({*state["done"], k})
        write_meta(store.meta, {MIGRATION: json.dumps(state)})
        copied.append(k)
        if after_shard is not None:
            after_shard(k)
    if _versions(db, source) != state["versions"]:
        state.update(done=[])
        write_meta(store.meta, {MIGRATION: json.dumps(state)})
        raise StoreError(
            f"the store at {store.uri} was written to while it was being re-sharded (a process opened it "
            f"before the migration began); the copy was discarded. Stop every writer and run "
            f"`engram migrate --shards {shards}` again"
        )
    write_meta(store.meta, {SHARDS: str(shards), MIGRATION: None})  # the switch, in one commit
    dropped = _drop_other_layouts(db, shards, after_drop)
    return MigrationReport(source, shards, _counts(db, shards), tuple(copied), resumed, dropped)


def _drop_other_layouts(db: Any, shards: int, after_drop: Callable[[str], None] | None) -> tuple[str, ...]:
    """Drop every table of :data:`TABLES` laid out for another shard count than ``shards`` (the store's count,
    with no migration under way: no other layout is in use); returns their names.

    The one place that lists the database (a migration is rare, and garbage has no record to be found by):
    a migration killed between its switch and its last drop leaves the old layout's tables behind."""
    dropped = []
    for name in sorted(_table_names(db)):
        found = _LAYOUT.fullmatch(name)
        if found and int(found["count"] or 1) != shards:
            db.drop_table(name)
            dropped.append(name)
            if after_drop is not None:
                after_drop(name)
    return tuple(dropped)


# ``memories`` (one shard) or ``memories_s3of4`` (shard 3 of 4): :func:`~engram_pipeline.store.shards.table_name`
_LAYOUT = re.compile(rf"(?:{'|'.join(TABLES)})(?:_s\d+of(?P<count>\d+))?")


def _table_names(db: Any) -> list[str]:
    names: list[str] = []
    token = None
    while True:
        page = db.list_tables(page_token=token, limit=1000)
        names += page.tables
        token = page.page_token
        if not token:
            return names


def _copy(db: Any, base: str, schema: pa.Schema, *, source: int, target: int, shard: int) -> None:
    """Write table ``base`` of target ``shard`` whole: the rows of every source shard that belong to it."""
    parts = []
    for s in range(source):
        table = open_table(db, table_name(base, s, source))
        if table is None:
            continue
        rows = table.to_arrow()
        if rows.num_rows:
            parts.append(rows.filter(pa.array(_shards_of(rows, base, target) == shard)))
    data = pa.concat_tables(parts).cast(schema) if parts else schema.empty_table()
    name = table_name(base, shard, target)
    if base == "memories":  # made anew, not overwritten: an overwrite would keep an old table's row ids
        if open_table(db, name) is not None:  # a killed run's copy, or a table an older layout left
            db.drop_table(name)
        created = create_memories(db, name, schema, data)
    elif open_table(db, name) is not None:  # a killed run's copy, or a table an older layout left: replaced
        created = db.create_table(name, data=data, schema=schema, mode="overwrite")
    else:
        created = db.create_table(name, data=data, schema=schema)
    if base == "memories":
        for column in SCALAR_INDEXES:
            created.create_index(column, config=BTree(), replace=True)


def _shards_of(rows: pa.Table, base: str, target: int) -> np.ndarray:
    """The target shard of each row: its ``agent_id``'s (a lease row: the agent its key names; else 0)."""
    agents = rows["agent_id"].to_pylist()
    if base == "cursors":
        agents = [
            a if a is not None else lease_agent(key) for a, key in zip(agents, rows["key"].to_pylist(), strict=True)
        ]
    # a sweep's cursor names its layout's shard (``shard/<k>-of-<n>``): never read under another count
    known = {a: 0 if is_shard_scope(a) else shard_of(a, target) for a in set(agents) if a is not None}
    return np.array([known.get(a, 0) if a is not None else 0 for a in agents], dtype=np.int64)


def _versions(db: Any, shards: int) -> dict[str, int]:
    out = {}
    for base in TABLES:
        for k in range(shards):
            table = open_table(db, table_name(base, k, shards))
            if table is not None:
                out[table_name(base, k, shards)] = int(table.version)
    return out


def _counts(db: Any, shards: int) -> dict[str, int]:
    out = {}
    for base in TABLES:
        total = 0
        for k in range(shards):
            table = open_table(db, table_name(base, k, shards))
            total += int(table.count_rows()) if table is not None else 0
        out[base] = total
    return out


__all__ = ["MigrationReport", "migrate"]
