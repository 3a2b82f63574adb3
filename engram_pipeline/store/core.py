"""``ShardedEngine``: the memory tables on LanceDB, their shards and side tables, and every verb on them.

The engine is the passes' typed interface (scans, compare-and-set batches, cursors, leases, audit, plans,
links, the side-table fan-out); the public store, :class:`~engram_pipeline.store.memory_store.MemoryStore`, is
the agent's verbs over one engine (``store.engine``).

>>> from engram_pipeline.settings import Settings
>>> engine = ShardedEngine.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> r = engine.remember("alice", "User prefers dark mode")
>>> r.outcome, engine.get(r.memory["id"])["version"]
('created', 1)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Unpack

import lancedb
import numpy as np
import pyarrow as pa

from engram_pipeline.embed import Embedder, get_embedder
from engram_pipeline.model import (
    META_SCHEMA,
    STATUSES,
    Memory,
    PlacedMemory,
    memory_schema,
    rows_to_table,
)
from engram_pipeline.settings import Settings
from engram_pipeline.store import cas, edits, one_trip
from engram_pipeline.store.access_fold import fold_access as _fold_access
from engram_pipeline.store.access_log import AccessFold, AccessLog, overlay_pending
from engram_pipeline.store.audit import AuditLog
from engram_pipeline.store.cursors import Cursors
from engram_pipeline.store.errors import InvalidInput, MemoryNotFound, StoreError, StoreNotFound
from engram_pipeline.store.links import Links
from engram_pipeline.store.maintain import maintain as _maintain
from engram_pipeline.store.meta import check_meta
from engram_pipeline.store.object_store import check_conditional_put
from engram_pipeline.store.plans import Plans
from engram_pipeline.store.recall import recall as _recall
from engram_pipeline.store.results import RememberResult
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.rows import build_row
from engram_pipeline.store.sharding import by_shard
from engram_pipeline.store.shards import CREATED_AT, Shard, open_table
from engram_pipeline.store.side_tables import SideTables
from engram_pipeline.store.sql import eq, in_list, lit, where_in
from engram_pipeline.store.validation import check_vector
from engram_pipeline.store.write.batch import Item, new_write_group
from engram_pipeline.store.write.cache import WriteCache
from engram_pipeline.store.write.commit import GroupCommit


class ShardedEngine(SideTables):
    """The store's engine. Open it with :meth:`open`; every write is a compare-and-set on ``version``.

    The engine is :attr:`shard_count` shards (``ENGRAM_SHARDS``, recorded in ``meta`` when the store is made):
    each agent's rows live in the tables of shard :meth:`shard_of` ``(agent_id)``, a
    :class:`~engram_pipeline.store.shards.Shard` holding ``memories`` and one collaborator per side table
    (``audit``: :class:`~engram_pipeline.store.audit.AuditLog`, ``links``, ``plans``, ``cursors``,
    ``access_log``), whose verbs over the shards it inherits from
    :class:`~engram_pipeline.store.side_tables.SideTables`. Verbs given an agent id go to its shard; verbs given
    only memory ids look in every shard (one indexed lookup per shard, stopping once every id is found). With
    one shard the tables have today's names and are also :attr:`memories`, :attr:`audit`, ... Verbs whose
    mechanism has a module of its own (compare-and-set, edits, recall, the access-log fold, maintenance) are
    that module's function, bound here once, so each signature is written in one place.
    """

    def __init__(self, db: Any, uri: str, settings: Settings, embedder: Embedder, *, migrating: bool = False) -> None:
        self.db = db
        self.uri = uri
        self.embedder = embedder
        self.settings = settings.with_profile(embedder.profile)
        self.memory_schema = memory_schema(embedder.dimension)
        # Each known table is opened by name, and created only when missing (see shards.open_table).
        self.meta = open_table(db, "meta") or db.create_table("meta", schema=META_SCHEMA, exist_ok=True)
        self.shard_count = check_meta(
            self.meta,
            uri=uri,
            embedder=embedder.name,
            dimension=embedder.dimension,
            shards=settings.shards,
            migrating=migrating,
        )
        self.shards = tuple(Shard(db, k, self.shard_count, self.memory_schema) for k in range(self.shard_count))
        self.write_cache = WriteCache(self.settings.write_cache_rows)  # the write path's checks, in memory
        # per shard, the group commit that batches concurrent remembers (a batch commits to one table)
        self.write_groups: tuple[GroupCommit[Item, RememberResult], ...] = tuple(
            new_write_group(self) for _ in self.shards
        )

    @classmethod
    def open(
        cls,
        uri: str | None = None,
        *,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        storage_options: dict[str, str] | None = None,
        create: bool = True,
        migrating: bool = False,
    ) -> ShardedEngine:
        """Open (or create) the store at a LanceDB ``uri``: a directory, ``memory://``, ``s3://...``, ...

        ``uri`` defaults to ``settings.resolved_db_uri``; a local path is made absolute. ``storage_options``
        default to ``ENGRAM_STORAGE_OPTIONS`` and are passed to LanceDB for object storage. With
        ``create=False`` a store that does not exist yet raises :class:`StoreNotFound` instead of being created.
        A store made with another shard count raises :class:`ShardCountMismatch`, one a re-shard left half-way
        :class:`MigrationInProgress` (``migrating=True`` is for :mod:`engram_pipeline.store.migrate` alone).
        """
        settings = settings or Settings.from_env()
        uri = uri or settings.resolved_db_uri
        if "://" not in uri:
            path = Path(uri).expanduser().resolve()  # absolute: the store is the same whatever the cwd later
            uri = str(path)
            if not create and not (path / "meta.lance").is_dir():
                raise StoreNotFound(uri)
            path.mkdir(parents=True, exist_ok=True)
        options = storage_options if storage_options is not None else settings.storage_options_dict
        check_conditional_put(uri, options)  # Lance commits on object storage need put-if-absent
        # Strong read consistency: every read sees the latest commit of any process, which the
        # compare-and-set protocol and concurrent passes rely on.
        db = lancedb.connect(uri, read_consistency_interval=timedelta(0), storage_options=options or None)
        if not create and open_table(db, "meta") is None:
            raise StoreNotFound(uri)
        return cls(db, uri, settings, embedder or get_embedder(settings), migrating=migrating)

    def check_layout(self) -> None:
        """Refuse to go on with a store whose layout changed since it was opened: raises what :meth:`open` would
        (:class:`MigrationInProgress` while a re-shard runs, :class:`ShardCountMismatch` after one). One read
        of ``meta``; a process that keeps a store open across runs calls it before each run."""
        check_meta(
            self.meta,
            uri=self.uri,
            embedder=self.embedder.name,
            dimension=self.embedder.dimension,
            shards=self.shard_count,
        )

    # -- shards ----------------------------------------------------------------------------------------
    def agents_in_shard(self, shard: int) -> list[str]:
        """Every agent id with at least one memory in shard ``shard`` (reads only that shard's table)."""
        if not 0 <= shard < self.shard_count:
            raise InvalidInput(f"shard must be in [0, {self.shard_count}); got {shard}")
        return _agents_of(self.shards[shard].memories)

    def locate(self, memory_ids: Sequence[str]) -> dict[int, list[str]]:
        """Which shard holds each of ``memory_ids`` that exists: ``{shard: ids}`` (ids found nowhere left out).
        One store: no read. Several: one indexed read of ``id`` per shard until every id is found."""
        ids = list(dict.fromkeys(memory_ids))
        if self.shard_count == 1:
            return {0: ids} if ids else {}
        return {k: [r["id"] for r in rows] for k, rows in self._rows_by_shard(ids, ["id"]).items()}

    def _only(self) -> Shard:
        if self.shard_count > 1:
            raise StoreError(
                f"the store at {self.uri} has {self.shard_count} shards: its tables are per shard "
                "(store.shards[k], store.shard_for(agent_id)); use a store verb"
            )
        return self.shards[0]

    # With one shard, its tables and collaborators under the names they always had.
    @property
    def memories(self) -> Any:
        return self._only().memories

    @property
    def links(self) -> Links:
        return self._only().links

    @property
    def audit(self) -> AuditLog:
        return self._only().audit

    @property
    def plans(self) -> Plans:
        return self._only().plans

    @property
    def cursors(self) -> Cursors:
        return self._only().cursors

    @property
    def access_log(self) -> AccessLog:
        return self._only().access_log

    # -- tables ----------------------------------------------------------------------------------------
    def tables(self) -> dict[str, Any]:
        """Every table maintenance compacts, by name (the LanceDB objects: for the store's own modules):
        each shard's ``memories``, ``links``, ``audit``, ``plans``, ``cursors`` and ``access_log``."""
        return {shard.name(base): table for shard in self.shards for base, table in shard.tables().items()}

    def discard_if_empty(self) -> bool:
        """Drop every table of the store, and its directory when that is left empty, if no table but ``meta``
        holds a row: a store made for a write that wrote nothing (an import whose every batch failed) leaves
        nothing behind. Returns whether it did; the store is not usable afterwards."""
        tables = self.tables()
        if any(table.count_rows() for table in tables.values()):
            return False
        for name in [*tables, "meta"]:
            self.db.drop_table(name)
        if "://" not in self.uri:
            with contextlib.suppress(OSError):  # not empty: something else lives there
                Path(self.uri).rmdir()
        return True

    def table_versions(self) -> dict[str, int]:
        """The latest version of every table, by name (a fresh look: other handles may have committed); the
        difference of two such maps is the commits made in between."""
        out = {}
        for name, table in self.tables().items():
            table.checkout_latest()
            out[name] = int(table.version)
        return out

    # -- reads -----------------------------------------------------------------------------------------
    def get(self, memory_id: str, *, agent_id: str | None = None, track_access: bool = True) -> Memory:
        """The row with this id, whatever its status. Raises :class:`MemoryNotFound`.

        With ``agent_id`` the row must belong to that agent (else it is reported as not found). Its
        ``access_count`` and ``last_accessed_at`` include reads logged but not yet folded (not this one);
        ``track_access`` logs this read.
        """
        shards = [self.shard_for(agent_id)] if agent_id is not None else self.shards
        for shard in shards:
            found = one_trip.read(shard.memories, eq("id", memory_id))
            if found.num_rows:
                break
        if not found.num_rows or (agent_id is not None and found["agent_id"][0].as_py() != agent_id):
            raise MemoryNotFound(memory_id)
        row: dict[str, Any] = overlay_pending(found, shard.access_log.pending(ids=[memory_id])).to_pylist()[0]
        if track_access:
            self.log_access([row])
        return row

    def get_many(self, memory_ids: Sequence[str], *, columns: list[str] | None = None) -> list[Memory]:
        return [r for rows in self._rows_by_shard(memory_ids, columns).values() for r in rows]

    def _rows_by_shard(self, memory_ids: Sequence[str], columns: list[str] | None) -> dict[int, list[Memory]]:
        """The rows of ``memory_ids`` by shard; shards are read in turn until every id is found."""
        out: dict[int, list[Memory]] = {}
        missing = list(dict.fromkeys(memory_ids))
        # with several shards a row's id is read too, to tell which ids are found (dropped again below)
        wanted = (list(dict.fromkeys([*columns, "id"])) if self.shard_count > 1 else columns) if columns else None
        for shard in self.shards:
            if not missing:
                break
            rows: list[Memory] = []
            for where in where_in("id", missing):
                rows.extend(one_trip.read(shard.memories, where, columns=wanted).to_pylist())
            if rows:
                out[shard.index] = rows
                if self.shard_count > 1:
                    found = {r["id"] for r in rows}
                    missing = [i for i in missing if i not in found]
                    if columns and "id" not in columns:
                        for r in rows:
                            del r["id"]
        return out

    def scan(
        self, agent_id: str, *, columns: list[str] | None = None, where: str | None = None, version: int | None = None
    ) -> pa.Table:
        """All rows of one agent as an Arrow table (``where`` is extra SQL the caller has quoted), as of its
        shard's table ``version`` if given (time travel: it must not have been cleaned up yet)."""
        cond = eq("agent_id", agent_id) + (f" AND ({where})" if where else "")
        shard = self.shard_for(agent_id)
        table = shard.memories
        if version is not None:
            table = self.db.open_table(shard.name("memories"))
            table.checkout(version)
        return one_trip.read(table, cond, columns=columns or None)

    def scan_agents(
        self,
        agent_ids: Iterable[str],
        *,
        columns: list[str] | None = None,
        where: str | None = None,
        version: int | None = None,
    ) -> pa.Table:
        """All rows of every agent in ``agent_ids`` as one Arrow table: :meth:`scan` for a set of agents (a
        sweep's one read), grouped by shard, in chunks of :data:`engram_pipeline.store.sql.IN_CHUNK` agents (one
        query each). A ``version`` is one shard's table version, so with one the agents must all be in one shard.
        No agent means an empty table of the schema (or of ``columns``)."""
        groups = by_shard(agent_ids, self.shard_count)
        if version is not None and len(groups) > 1:
            raise InvalidInput(f"a scan as of a table version reads one shard; these agents are in {len(groups)}")
        parts = []
        for k, agents in groups.items():
            table = self.shards[k].memories
            if version is not None:
                table = self.db.open_table(self.shards[k].name("memories"))
                table.checkout(version)
            for cond in where_in("agent_id", agents):
                parts.append(one_trip.read(table, cond + (f" AND ({where})" if where else ""), columns=columns or None))
        if not parts:
            schema = self.memory_schema
            return schema.empty_table() if not columns else pa.schema([schema.field(c) for c in columns]).empty_table()
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def list_memories(
        self,
        agent_id: str,
        *,
        status: str | Iterable[str] | None = None,
        tier: str | None = None,
        kind: str | None = None,
        tag: str | None = None,
        limit: int | None = None,
    ) -> list[Memory]:
        """Rows of one agent, newest first, filtered by status, tier, kind and tag."""
        conds = []
        if status is not None:
            conds.append(f"status IN {in_list([status] if isinstance(status, str) else status)}")
        if tier is not None:
            conds.append(eq("tier", tier))
        if kind is not None:
            conds.append(eq("kind", kind))
        if tag is not None:
            conds.append(f"array_has(tags, {lit(tag)})")
        rows: list[dict[str, Any]] = self.scan(agent_id, where=" AND ".join(conds) or None).to_pylist()
        rows.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
        return rows[:limit] if limit is not None else rows

    def agents(self) -> list[str]:
        """Every agent id that has at least one memory (in any shard)."""
        return sorted({a for shard in self.shards for a in _agents_of(shard.memories)})

    def has_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has at least one memory (whatever its status)."""
        return bool(self.shard_for(agent_id).memories.count_rows(eq("agent_id", agent_id)))

    def count(self, agent_id: str | None = None, *, where: str | None = None) -> int:
        """How many rows (of ``agent_id``, passing ``where``, extra SQL the caller has quoted) there are."""
        conds = [eq("agent_id", agent_id)] if agent_id is not None else []
        if where:
            conds.append(f"({where})")
        shards = self.shards if agent_id is None else [self.shard_for(agent_id)]
        return sum(int(shard.memories.count_rows(" AND ".join(conds) or None)) for shard in shards)

    def counts_by_status(self) -> dict[str, dict[str, int]]:
        """``{agent_id: {status: rows}}`` over the whole store (statuses without rows left out)."""
        counts: dict[str, dict[str, int]] = {}
        for shard in self.shards:
            table = one_trip.read(shard.memories, columns=["agent_id", "status"])
            grouped = table.group_by(["agent_id", "status"]).aggregate([([], "count_all")])
            for row in grouped.to_pylist():
                counts.setdefault(row["agent_id"], {})[row["status"]] = int(row["count_all"])
        return counts

    def memories_version(self, agent_id: str | None = None) -> int:
        """The version of ``agent_id``'s ``memories`` table (it moves with every commit that writes memories
        of that shard); without an agent, the sum over shards (it moves with every commit to any)."""
        if agent_id is not None:
            return int(self.shard_for(agent_id).memories.version)
        return sum(int(shard.memories.version) for shard in self.shards)

    def shard_versions(self, shards: Iterable[int] | None = None) -> dict[int, int]:
        """``{shard: version of its memories table}`` for ``shards`` (default: all)."""
        wanted = range(self.shard_count) if shards is None else shards
        return {k: int(self.shards[k].memories.version) for k in wanted}

    def existing_hashes(self, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` (content hashes, any agent) some stored row has."""
        reads = [
            one_trip.rows(shard.memories, where, columns=["content_hash"])
            for shard in self.shards
            for where in where_in("content_hash", hashes)
        ]
        found: set[str] = set()
        for rows in one_trip.run(one_trip.together(*reads)):  # every chunk of every shard in one trip
            found.update(rows["content_hash"].to_pylist())
        return found

    def nearest(
        self, agent_id: str, vectors: Sequence[Sequence[float]], *, where: str | None = None, k: int = 1
    ) -> list[dict[str, Any]]:
        """For each of ``vectors``, its ``k`` nearest rows of the agent passing ``where`` (extra SQL the caller
        has quoted), by cosine distance, in one query: dicts of ``id``, ``_distance`` and ``query_index`` (the
        position of the vector in ``vectors``)."""
        if not vectors:
            return []
        cond = eq("agent_id", agent_id) + (f" AND ({where})" if where else "")
        table = self.shard_for(agent_id).memories
        search = table.search([list(v) for v in vectors]).metric("cosine").where(cond, prefilter=True)
        hits: list[dict[str, Any]] = search.select(["id", "_distance"]).limit(k).to_arrow().to_pylist()
        for hit in hits:
            hit.setdefault("query_index", 0)  # absent when there is one query
        return hits

    def ids_written_at(self, version: int, ids: Sequence[str], token: str, *, shard: int = 0) -> list[str]:
        """Which of ``ids`` carry ``token`` at version ``version`` of ``shard``'s table (i.e. were written by
        that commit)."""
        snapshot = self.db.open_table(self.shards[shard].name("memories"))
        snapshot.checkout(version)
        ids_written: list[str] = []
        for where in where_in("id", ids):
            rows = one_trip.read(snapshot, f"{where} AND write_token = {lit(token)}", columns=["id"])
            ids_written += rows["id"].to_pylist()
        return ids_written

    def ids_at(self, version: int, ids: Sequence[str], *, shard: int = 0) -> list[str]:
        """Which of ``ids`` exist at version ``version`` of ``shard``'s table."""
        snapshot = self.db.open_table(self.shards[shard].name("memories"))
        snapshot.checkout(version)
        found: list[str] = []
        for where in where_in("id", ids):
            rows = one_trip.read(snapshot, where, columns=["id"])
            found.extend(rows["id"].to_pylist())
        return found

    # -- writes ----------------------------------------------------------------------------------------
    def remember(
        self,
        agent_id: str,
        content: str,
        *,
        tier: str = "auto",
        kind: str = "semantic",
        tags: Sequence[str] = (),
        source: str = "agent",
        outcome: str | None = None,
        pinned: bool = False,
        importance: float | None = None,
        confidence: float | None = None,
        metadata: dict[str, Any] | None = None,
        memory_id: str | None = None,
        created_at: datetime | None = None,
        ttl_s: int | None = None,
        vector: Sequence[float] | None = None,
        actor: str = "library",
    ) -> RememberResult:
        """:meth:`MemoryStore.remember <engram_pipeline.store.memory_store.MemoryStore.remember>` (what it does
        is said there): the row is built here and handed to its shard's group commit."""
        row = self.new_row(
            agent_id,
            content,
            tier=tier,
            kind=kind,
            tags=tags,
            source=source,
            outcome=outcome,
            pinned=pinned,
            importance=importance,
            confidence=confidence,
            metadata=metadata,
            memory_id=memory_id,
            created_at=created_at,
            ttl_s=ttl_s,
        )
        return self.write_groups[self.shard_of(agent_id)].submit(self._with_vector(row, vector, actor))

    async def remember_async(
        self,
        agent_id: str,
        content: str,
        *,
        vector: Sequence[float] | None = None,
        actor: str = "library",
        **fields: Unpack[PlacedMemory],
    ) -> RememberResult:
        """:meth:`remember` for a coroutine (the HTTP API's), with the same keyword arguments (``model.PlacedMemory``,
        whose defaults are ``remember``'s): the row is
        validated at once, then the coroutine awaits its batch's commit without holding a thread
        (:meth:`~engram_pipeline.store.write.commit.GroupCommit.submit_async`)."""
        row = self.new_row(agent_id, content, **fields)
        return await self.write_groups[self.shard_of(agent_id)].submit_async(self._with_vector(row, vector, actor))

    def _with_vector(self, row: Memory, vector: Sequence[float] | None, actor: str = "library") -> Item:
        """A write for the group commit: ``row`` with its given ``vector`` checked, or none yet (the batch
        embeds the contents of its rows without one in one call: ``write.batch.remember_batch``)."""
        if vector is not None:
            row["vector"] = check_vector(vector, self.embedder.dimension)
        return (row, actor)

    def new_row(self, agent_id: str, content: str, **fields: Any) -> Memory:
        """Validate the fields of a new memory and build its row (without a vector); see
        :func:`engram_pipeline.store.rows.build_row`. Raises InvalidInput."""
        return build_row(self.settings, agent_id, content, **fields)

    def insert_rows(self, rows: Sequence[Memory]) -> list[str]:
        """Insert new rows in one commit per shard they fall in, skipping any whose (agent, content) already
        exists. Returns the ids inserted.

        The insert is a ``merge_insert`` on ``content_hash``, but racing inserts of one new key can both land
        (lancedb 0.40 does not detect that conflict). So after the commit every inserted content hash is looked
        up again: where a racing writer's row exists too, the row committed first stays, and a writer whose row
        came later deletes its own (audited, action ``dedup_collapse``) and does not report it as inserted.
        """
        if not rows:
            return []
        unique = list({r["content_hash"]: r for r in rows}.values())
        kept: set[str] = set()
        for k, group in self._group(unique).items():
            table = rows_to_table(group, self.memory_schema)
            result = with_retry(partial(_insert_new_hashes, self.shards[k].memories, table))
            if result.num_inserted_rows == len(group):
                inserted = group
            else:
                present = {r["id"] for r in self.get_many([r["id"] for r in group], columns=["id"])}
                inserted = [r for r in group if r["id"] in present]
            kept.update(self._drop_lost_races(inserted))
        return [r["id"] for r in unique if r["id"] in kept]

    def _drop_lost_races(self, inserted: Sequence[Memory]) -> list[str]:
        """The ids of ``inserted`` (rows of one shard) that won their content hash (see :meth:`insert_rows`);
        losers are deleted."""
        if not inserted:
            return []
        shard = self.shard_for(inserted[0]["agent_id"])
        mine = {r["content_hash"]: r for r in inserted}
        same: dict[str, list[Memory]] = {}
        hashes = list(mine)
        for where in where_in("content_hash", hashes):
            for r in one_trip.read(shard.memories, where, columns=["id", "content_hash"]).to_pylist():
                same.setdefault(r["content_hash"], []).append(r)
        lost: dict[str, int] = {}
        for digest, group in same.items():
            if len(group) > 1 and self._first_committed(group, shard=shard)["id"] != mine[digest]["id"]:
                lost[mine[digest]["id"]] = int(mine[digest]["version"])
        lost_hashes = {r["content_hash"] for r in inserted if r["id"] in lost}
        for _ in range(3):  # a loser edited meanwhile (a near-duplicate write reinforced it) is re-read
            if not lost:
                break
            missed = self.cas_delete(lost, actor="store", action="dedup_collapse").skipped_concurrent_edit
            lost = {r["id"]: int(r["version"]) for r in self.get_many(list(missed), columns=["id", "version"])}
        return [r["id"] for r in inserted if r["content_hash"] not in lost_hashes]

    def _first_committed(self, rows: Sequence[Memory], *, shard: Shard | None = None) -> Memory:
        """Of rows sharing a content hash (so of one agent, in one shard: ``shard``, default that of the first
        row's ``agent_id``), the one whose commit came first: the lowest created version, where the table
        keeps its rows' versions; else, since each commit adds at most one of them, the one the earliest
        table version holding any of them holds (a binary search over the table's versions)."""
        if len(rows) == 1:
            return rows[0]
        shard = shard or self.shard_for(rows[0]["agent_id"])
        ids = [r["id"] for r in rows]
        if shard.tracks_versions:  # each row says which version created it
            read = one_trip.read(shard.memories, f"id IN {in_list(ids)}", columns=["id", CREATED_AT])
            created = {r["id"]: r[CREATED_AT] for r in read.to_pylist()}
            if len(created) == len(ids):
                first_id = min(ids, key=lambda i: (created[i], i))
                return next(r for r in rows if r["id"] == first_id)
        versions = sorted(int(v["version"]) for v in shard.memories.list_versions())
        lo, hi = 0, len(versions) - 1
        try:
            while lo < hi:
                mid = (lo + hi) // 2
                if self.ids_at(versions[mid], ids, shard=shard.index):
                    hi = mid
                else:
                    lo = mid + 1
            first = sorted(self.ids_at(versions[lo], ids, shard=shard.index))
        except Exception:  # those versions were cleaned up: fall back to the lowest id
            first = sorted(ids)
        return next(r for r in rows if r["id"] == first[0])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed(list(texts))

    def _vector_for(self, content: str, vector: Sequence[float] | None) -> list[float]:
        if vector is None:
            embedded: list[float] = self.embed([content])[0].tolist()
            return embedded
        return check_vector(vector, self.embedder.dimension)

    def _by_hash(self, agent_id: str, digest: str) -> Memory | None:
        cond = f"{eq('content_hash', digest)} AND {eq('agent_id', agent_id)}"
        found = one_trip.read(self.shard_for(agent_id).memories, cond).to_pylist()
        # Two rows only in the instant between racing inserts and the loser's clean-up: name the one that stays.
        return self._first_committed(found) if found else None

    # -- verbs whose mechanism has its own module ------------------------------------------------------
    update = edits.update
    delete = edits.delete
    restore = edits.restore
    record_access = edits.record_access
    cas_write = cas.cas_write
    cas_delete = cas.cas_delete
    recall = _recall
    fold_access = _fold_access
    maintain = _maintain


__all__ = ["AccessFold", "RememberResult", "STATUSES", "ShardedEngine"]


def _insert_new_hashes(memories: Any, rows: pa.Table) -> Any:
    return memories.merge_insert("content_hash").when_not_matched_insert_all().execute(rows)


def _agents_of(memories: Any) -> list[str]:
    """The distinct agent ids of one ``memories`` table."""
    ids = one_trip.read(memories, columns=["agent_id"])["agent_id"]
    return sorted(set(ids.to_pylist()))
