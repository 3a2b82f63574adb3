"""One shard of the store: its tables and the collaborators that own them.

A store of ``N`` shards keeps every agent's rows in the tables of shard ``shard_of(agent_id, N)``
(:mod:`engram_pipeline.store.sharding`): ``memories`` and the tables that grow with it (``links``, ``audit``,
``access_log``) and the per-agent ``cursors`` and ``plans``, which every pass commits to per agent (unsharded,
agents of different shards would contend on them). Only ``meta`` is shared. Lance serialises commits per table,
so agents of different shards never wait for one another.

Table names: a store of one shard has today's names (``memories``, ``links``, ...); shard ``k`` of ``N > 1`` is
``memories_s{k}of{N}``. The count is in the name so that ``engram migrate --shards M`` writes the new layout
beside the old one (LanceDB cannot rename a table) and an interrupted migration never mixes the two.

>>> table_name("memories", 0, 1), table_name("audit", 3, 4)
('memories', 'audit_s3of4')
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from lancedb.index import BTree

from engram_pipeline.model import ACCESS_LOG_SCHEMA, AUDIT_SCHEMA, CURSOR_SCHEMA, LINK_SCHEMA, PLAN_SCHEMA
from engram_pipeline.store.access_log import AccessLog
from engram_pipeline.store.appends import Appends
from engram_pipeline.store.audit import AuditLog
from engram_pipeline.store.cursors import Cursors
from engram_pipeline.store.links import Links
from engram_pipeline.store.maintenance import SCALAR_INDEXES, TABLES
from engram_pipeline.store.plans import Plans
from engram_pipeline.store.retry import with_retry

SIDE_SCHEMAS: dict[str, pa.Schema] = {
    "links": LINK_SCHEMA,
    "audit": AUDIT_SCHEMA,
    "plans": PLAN_SCHEMA,
    "cursors": CURSOR_SCHEMA,
    "access_log": ACCESS_LOG_SCHEMA,
}


# ``memories`` is created with stable row ids: Lance then keeps, per row, the table version that created it
# and the last that changed it (``_row_created_at_version``, ``_row_last_updated_at_version``), through
# compaction too, so the write cache can read only what changed since its views' version
# (:mod:`engram_pipeline.store.write.cache`). A table made without them reads 1 for both on every row, and
# the option cannot be turned on for a table that exists (an overwrite keeps the table's row ids), so a
# table made with it says so in its schema's metadata (:data:`ROW_VERSIONS`).
MEMORIES_OPTIONS = {"new_table_enable_stable_row_ids": "true"}
ROW_VERSIONS = b"engram.row_versions"
CREATED_AT, UPDATED_AT = "_row_created_at_version", "_row_last_updated_at_version"  # Lance's per-row versions


# ``id`` is the table's unenforced primary key: Lance then records the keys each ``merge_insert`` inserts in its
# commit, and of two racing inserts of one key the second conflicts, retries, finds the key and inserts
# nothing. That is what keeps an id on one row when two restores of a deleted memory race (a check that reads
# before it writes cannot: both read "absent"). Only ``restore`` inserts a known id; new rows get fresh ones.
PRIMARY_KEY = "id"
_PK_MARK = b"lance-schema:unenforced-primary-key:position"


def create_memories(
    db: Any, name: str, schema: pa.Schema, data: pa.Table | None = None, *, exist_ok: bool = False
) -> Any:
    """A new ``memories`` table ``name`` with stable row ids, marked so, keyed on ``id``, holding ``data``."""
    marked = schema.with_metadata({**(schema.metadata or {}), ROW_VERSIONS: b"1"})
    key = marked.get_field_index(PRIMARY_KEY)
    marked = marked.set(key, marked.field(key).with_metadata({_PK_MARK: b"1"}))
    rows = None if data is None else data.cast(marked)
    return db.create_table(name, data=rows, schema=marked, exist_ok=exist_ok, storage_options=MEMORIES_OPTIONS)


def keyed(table: Any) -> bool:
    """Whether ``table`` (a ``memories``) has ``id`` as its unenforced primary key."""
    return _PK_MARK in (table.schema.field(PRIMARY_KEY).metadata or {})


def ensure_keyed(table: Any) -> None:
    """Key a ``memories`` table made before its key (one schema commit, once; a racing opener may do it first)."""
    if keyed(table):
        return
    try:
        with_retry(lambda: table.set_unenforced_primary_key(PRIMARY_KEY))
    except ValueError as exc:
        if "already set" not in str(exc):
            raise


def tracks_versions(table: Any) -> bool:
    """Whether ``table`` (a ``memories``) keeps its rows' created and last-changed versions."""
    return (table.schema.metadata or {}).get(ROW_VERSIONS) == b"1"


def table_name(base: str, shard: int, shards: int) -> str:
    """The name of table ``base`` (one of :data:`~engram_pipeline.store.maintenance.TABLES`) of ``shard``."""
    return base if shards == 1 else f"{base}_s{shard}of{shards}"


def schemas(memory_schema: pa.Schema) -> dict[str, pa.Schema]:
    """The schema of every sharded table, by base name, in :data:`TABLES` order."""
    return {name: memory_schema if name == "memories" else SIDE_SCHEMAS[name] for name in TABLES}


class Shard:
    """Shard ``index`` of a store of ``count`` shards: its ``memories`` table and side-table collaborators."""

    def __init__(self, db: Any, index: int, count: int, memory_schema: pa.Schema) -> None:
        self.index = index
        self.count = count
        memories = open_table(db, self.name("memories"))
        if memories is None:  # exist_ok: when another process made it first, that one
            self.memories = create_memories(db, self.name("memories"), memory_schema, exist_ok=True)
        else:
            self.memories = memories
        ensure_keyed(self.memories)
        self.tracks_versions = tracks_versions(self.memories)
        self.links = Links(self._side_table(db, "links"))
        self.audit = AuditLog(self._side_table(db, "audit"), memory_schema)
        self.plans = Plans(self._side_table(db, "plans"))
        self.cursors = Cursors(self._side_table(db, "cursors"))
        self.access_log = AccessLog(self._side_table(db, "access_log"))
        if memories is None:
            for column in SCALAR_INDEXES:
                self.memories.create_index(column, config=BTree(), replace=True)
        self.appends = Appends(self.memories)  # the write path's appends and version checks

    def name(self, base: str) -> str:
        return table_name(base, self.index, self.count)

    def _side_table(self, db: Any, base: str) -> Any:
        name = self.name(base)
        return open_table(db, name) or db.create_table(name, schema=SIDE_SCHEMAS[base], exist_ok=True)

    def tables(self) -> dict[str, Any]:
        """This shard's tables by base name (``memories``, ``links``, ...), in :data:`TABLES` order."""
        return {
            "memories": self.memories,
            "links": self.links.table,
            "audit": self.audit.table,
            "plans": self.plans.table,
            "cursors": self.cursors.table,
            "access_log": self.access_log.table,
        }


def open_table(db: Any, name: str) -> Any:
    """Table ``name`` of ``db``, or None when it does not exist (LanceDB says so with a ValueError).

    Opened by name, never by listing the database: a listing reads every table's directory (one LIST per
    page on object storage), whatever else the store holds."""
    try:
        return db.open_table(name)
    except ValueError as exc:
        if "was not found" not in str(exc):
            raise
        return None
