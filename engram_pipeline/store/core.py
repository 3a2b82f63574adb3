"""``MemoryStore``: the memory tables on LanceDB, and the verbs agents and passes use on them.

>>> from engram_pipeline.settings import Settings
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> r = store.remember("alice", "User prefers dark mode")
>>> r.outcome, store.get(r.memory["id"])["version"]
('created', 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import polars as pl
import pyarrow as pa
from lancedb.index import BTree

from engram_pipeline.embed import Embedder, get_embedder
from engram_pipeline.model import (
    ACCESS_LOG_SCHEMA,
    AUDIT_SCHEMA,
    CURSOR_SCHEMA,
    LINK_SCHEMA,
    META_SCHEMA,
    PLAN_SCHEMA,
    STATUSES,
    Memory,
    memory_schema,
    rows_to_table,
)
from engram_pipeline.settings import Settings
from engram_pipeline.store import access_log, cas, edits, maintenance, write_path
from engram_pipeline.store.access_log import AccessFold, AccessLog, overlay_pending
from engram_pipeline.store.audit import AuditEvent, AuditLog
from engram_pipeline.store.cursors import Cursors
from engram_pipeline.store.errors import MemoryNotFound, StoreNotFound
from engram_pipeline.store.links import Link, Links
from engram_pipeline.store.maintenance import SCALAR_INDEXES
from engram_pipeline.store.meta import check_meta
from engram_pipeline.store.plans import Plan, Plans, PlanStatus
from engram_pipeline.store.recall import recall as _recall
from engram_pipeline.store.results import RememberResult
from engram_pipeline.store.rows import build_row
from engram_pipeline.store.sql import eq, in_list, lit
from engram_pipeline.store.validation import check_vector

AGENT_CHUNK = 1000  # agents per query of a multi-agent read (an IN list of that many quoted ids)


class MemoryStore:
    """The memory store. Open it with :meth:`open`; every write is a compare-and-set on ``version``.

    The ``memories`` table is the store's own; each side table belongs to one collaborator, which holds its
    reads and writes: :attr:`audit` (:class:`~engram_pipeline.store.audit.AuditLog`), :attr:`links`,
    :attr:`plans`, :attr:`cursors` and :attr:`access_log`. Verbs whose mechanism has a module of its own
    (compare-and-set, edits, recall, the access-log fold, maintenance) are that module's function, bound here
    once, so each signature is written in one place.
    """

    def __init__(self, db: Any, uri: str, settings: Settings, embedder: Embedder) -> None:
        self.db = db
        self.uri = uri
        self.embedder = embedder
        self.settings = settings.with_profile(embedder.profile)
        self.memory_schema = memory_schema(embedder.dimension)
        # Each known table is opened by name, and created only when missing: listing the database would read
        # every table's directory (one LIST per page on object storage), whatever else the store holds.
        self.meta = _open_table(db, "meta") or db.create_table("meta", schema=META_SCHEMA, exist_ok=True)
        check_meta(self.meta, uri=uri, embedder=embedder.name, dimension=embedder.dimension)
        memories = _open_table(db, "memories")
        self.memories = memories or db.create_table("memories", schema=self.memory_schema, exist_ok=True)
        self.links = Links(self._table("links", LINK_SCHEMA))
        self.audit = AuditLog(self._table("audit", AUDIT_SCHEMA), self.memory_schema)
        self.plans = Plans(self._table("plans", PLAN_SCHEMA))
        self.cursors = Cursors(self._table("cursors", CURSOR_SCHEMA))
        self.access_log = AccessLog(self._table("access_log", ACCESS_LOG_SCHEMA))
        if memories is None:
            self._create_scalar_indexes()
        self.write_group = write_path.new_write_group(self)  # batches concurrent remembers into one commit

    @classmethod
    def open(
        cls,
        uri: str | None = None,
        *,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        storage_options: dict[str, str] | None = None,
        create: bool = True,
    ) -> MemoryStore:
        """Open (or create) the store at a LanceDB ``uri``: a directory, ``memory://``, ``s3://...``, ...

        ``uri`` defaults to ``settings.resolved_db_uri``; a local path is made absolute. ``storage_options``
        default to ``ENGRAM_STORAGE_OPTIONS`` and are passed to LanceDB for object storage. With
        ``create=False`` a store that does not exist yet raises :class:`StoreNotFound` instead of being created.
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
        # Strong read consistency: every read sees the latest commit of any process, which the
        # compare-and-set protocol and concurrent passes rely on.
        db = lancedb.connect(uri, read_consistency_interval=timedelta(0), storage_options=options or None)
        if not create and _open_table(db, "meta") is None:
            raise StoreNotFound(uri)
        return cls(db, uri, settings, embedder or get_embedder(settings))

    # -- tables ----------------------------------------------------------------------------------------
    def _table(self, name: str, schema: pa.Schema) -> Any:
        return _open_table(self.db, name) or self.db.create_table(name, schema=schema, exist_ok=True)

    def tables(self) -> dict[str, Any]:
        """Every table maintenance compacts, by name (the LanceDB objects: for the store's own modules)."""
        return {
            "memories": self.memories,
            "links": self.links.table,
            "audit": self.audit.table,
            "plans": self.plans.table,
            "cursors": self.cursors.table,
            "access_log": self.access_log.table,
        }

    def table_versions(self) -> dict[str, int]:
        """The latest version of every table, by name (a fresh look: other handles may have committed); the
        difference of two such maps is the commits made in between."""
        out = {}
        for name, table in self.tables().items():
            table.checkout_latest()
            out[name] = int(table.version)
        return out

    def _create_scalar_indexes(self) -> None:
        for column in SCALAR_INDEXES:
            self.memories.create_index(column, config=BTree(), replace=True)

    # -- reads -----------------------------------------------------------------------------------------
    def get(self, memory_id: str, *, agent_id: str | None = None, track_access: bool = True) -> Memory:
        """The row with this id, whatever its status. Raises :class:`MemoryNotFound`.

        With ``agent_id`` the row must belong to that agent (else it is reported as not found). Its
        ``access_count`` and ``last_accessed_at`` include reads logged but not yet folded (not this one);
        ``track_access`` logs this read.
        """
        found = self.memories.search().where(eq("id", memory_id)).limit(None).to_arrow()
        if not found.num_rows or (agent_id is not None and found["agent_id"][0].as_py() != agent_id):
            raise MemoryNotFound(memory_id)
        row = overlay_pending(found, self.access_log.pending(ids=[memory_id])).to_pylist()[0]
        if track_access:
            self.log_access([row])
        return row

    def get_many(self, memory_ids: Sequence[str], *, columns: list[str] | None = None) -> list[Memory]:
        if not memory_ids:
            return []
        out: list[Memory] = []
        ids = list(dict.fromkeys(memory_ids))
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            q = self.memories.search().where(f"id IN {in_list(chunk)}")
            if columns:
                q = q.select(columns)
            out.extend(q.limit(None).to_arrow().to_pylist())
        return out

    def scan(
        self, agent_id: str, *, columns: list[str] | None = None, where: str | None = None, version: int | None = None
    ) -> pa.Table:
        """All rows of one agent as an Arrow table (``where`` is extra SQL the caller has quoted), as of table
        ``version`` if given (time travel: it must not have been cleaned up yet)."""
        cond = eq("agent_id", agent_id) + (f" AND ({where})" if where else "")
        table = self.memories
        if version is not None:
            table = self.db.open_table("memories")
            table.checkout(version)
        q = table.search().where(cond)
        if columns:
            q = q.select(columns)
        return q.limit(None).to_arrow()

    def scan_agents(
        self,
        agent_ids: Sequence[str],
        *,
        columns: list[str] | None = None,
        where: str | None = None,
        version: int | None = None,
    ) -> pa.Table:
        """All rows of every agent in ``agent_ids`` as one Arrow table: :meth:`scan` for a set of agents (a
        sweep's one read). Long lists are read in chunks of :data:`AGENT_CHUNK` agents (one query each) and
        concatenated; no agent means an empty table of the schema (or of ``columns``)."""
        agents = sorted(set(agent_ids))
        table = self.memories
        if version is not None:
            table = self.db.open_table("memories")
            table.checkout(version)
        parts = []
        for start in range(0, len(agents), AGENT_CHUNK):
            cond = f"agent_id IN {in_list(agents[start : start + AGENT_CHUNK])}" + (f" AND ({where})" if where else "")
            q = table.search().where(cond)
            if columns:
                q = q.select(columns)
            parts.append(q.limit(None).to_arrow())
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
        rows = self.scan(agent_id, where=" AND ".join(conds) or None).to_pylist()
        rows.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
        return rows[:limit] if limit is not None else rows

    def agents(self) -> list[str]:
        """Every agent id that has at least one memory."""
        ids = self.memories.search().select(["agent_id"]).limit(None).to_arrow()["agent_id"]
        return sorted(set(ids.to_pylist()))

    def has_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has at least one memory (whatever its status)."""
        return bool(self.memories.count_rows(eq("agent_id", agent_id)))

    def count(self, agent_id: str | None = None, *, where: str | None = None) -> int:
        """How many rows (of ``agent_id``, passing ``where``, extra SQL the caller has quoted) there are."""
        conds = [eq("agent_id", agent_id)] if agent_id is not None else []
        if where:
            conds.append(f"({where})")
        return int(self.memories.count_rows(" AND ".join(conds) or None))

    def counts_by_status(self) -> dict[str, dict[str, int]]:
        """``{agent_id: {status: rows}}`` over the whole store (statuses without rows left out)."""
        table = self.memories.search().select(["agent_id", "status"]).limit(None).to_arrow()
        grouped = table.group_by(["agent_id", "status"]).aggregate([([], "count_all")])
        counts: dict[str, dict[str, int]] = {}
        for row in grouped.to_pylist():
            counts.setdefault(row["agent_id"], {})[row["status"]] = int(row["count_all"])
        return counts

    def memories_version(self) -> int:
        """The ``memories`` table's version: it moves with every commit that writes memories."""
        return int(self.memories.version)

    def existing_hashes(self, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` (content hashes, any agent) some stored row has."""
        found: set[str] = set()
        for start in range(0, len(hashes), 1000):
            chunk = hashes[start : start + 1000]
            rows = self.memories.search().where(f"content_hash IN {in_list(chunk)}").select(["content_hash"])
            found.update(rows.limit(None).to_arrow()["content_hash"].to_pylist())
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
        search = self.memories.search([list(v) for v in vectors]).metric("cosine").where(cond, prefilter=True)
        hits: list[dict[str, Any]] = search.select(["id", "_distance"]).limit(k).to_arrow().to_pylist()
        for hit in hits:
            hit.setdefault("query_index", 0)  # absent when there is one query
        return hits

    def ids_written_at(self, version: int, ids: Sequence[str], token: str) -> list[str]:
        """Which of ``ids`` carry ``token`` at table ``version`` (i.e. were written by that commit)."""
        snapshot = self.db.open_table("memories")
        snapshot.checkout(version)
        rows = (
            snapshot.search()
            .where(f"id IN {in_list(ids)} AND write_token = {lit(token)}")
            .select(["id"])
            .limit(None)
            .to_arrow()
        )
        return rows["id"].to_pylist()

    def ids_at(self, version: int, ids: Sequence[str]) -> list[str]:
        """Which of ``ids`` exist at table ``version``."""
        snapshot = self.db.open_table("memories")
        snapshot.checkout(version)
        found: list[str] = []
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            rows = snapshot.search().where(f"id IN {in_list(chunk)}").select(["id"]).limit(None).to_arrow()
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
        """Store a memory, or return the one it duplicates.

        Exact content (per agent, case- and whitespace-insensitive) returns the existing row untouched with
        outcome ``exact_duplicate``. Otherwise the write-time checks run (semantic dedup and contradictions,
        ``engram_pipeline.store.write_path``) and the row is inserted with outcome ``created``.
        """
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
        row["vector"] = self._vector_for(content, vector)
        return self.write_group.submit((row, actor))

    def new_row(self, agent_id: str, content: str, **fields: Any) -> Memory:
        """Validate the fields of a new memory and build its row (without a vector); see
        :func:`engram_pipeline.store.rows.build_row`. Raises InvalidInput."""
        return build_row(self.settings, agent_id, content, **fields)

    def insert_rows(self, rows: Sequence[Memory]) -> list[str]:
        """Insert new rows in one commit, skipping any whose (agent, content) already exists. Returns the
        ids inserted.

        The insert is a ``merge_insert`` on ``content_hash``, but racing inserts of one new key can both land
        (lancedb 0.40 does not detect that conflict). So after the commit every inserted content hash is looked
        up again: where a racing writer's row exists too, the row committed first stays, and a writer whose row
        came later deletes its own (audited, action ``dedup_collapse``) and does not report it as inserted.
        """
        if not rows:
            return []
        unique = list({r["content_hash"]: r for r in rows}.values())
        table = rows_to_table(unique, self.memory_schema)
        result = cas._with_retry(
            lambda: self.memories.merge_insert("content_hash").when_not_matched_insert_all().execute(table)
        )
        if result.num_inserted_rows == len(unique):
            inserted = unique
        else:
            present = {r["id"] for r in self.get_many([r["id"] for r in unique], columns=["id"])}
            inserted = [r for r in unique if r["id"] in present]
        return self._drop_lost_races(inserted)

    def _drop_lost_races(self, inserted: Sequence[Memory]) -> list[str]:
        """The ids of ``inserted`` that won their content hash (see :meth:`insert_rows`); losers are deleted."""
        mine = {r["content_hash"]: r for r in inserted}
        same: dict[str, list[Memory]] = {}
        hashes = list(mine)
        for start in range(0, len(hashes), 1000):
            chunk = hashes[start : start + 1000]
            q = self.memories.search().where(f"content_hash IN {in_list(chunk)}").select(["id", "content_hash"])
            for r in q.limit(None).to_arrow().to_pylist():
                same.setdefault(r["content_hash"], []).append(r)
        lost: dict[str, int] = {}
        for digest, group in same.items():
            if len(group) > 1 and self._first_committed(group)["id"] != mine[digest]["id"]:
                lost[mine[digest]["id"]] = int(mine[digest]["version"])
        lost_hashes = {r["content_hash"] for r in inserted if r["id"] in lost}
        for _ in range(3):  # a loser edited meanwhile (a near-duplicate write reinforced it) is re-read
            if not lost:
                break
            missed = self.cas_delete(lost, actor="store", action="dedup_collapse").skipped_concurrent_edit
            lost = {r["id"]: int(r["version"]) for r in self.get_many(list(missed), columns=["id", "version"])}
        return [r["id"] for r in inserted if r["content_hash"] not in lost_hashes]

    def _first_committed(self, rows: Sequence[Memory]) -> Memory:
        """Of rows sharing a content hash, the one whose commit came first: each commit adds at most one of
        them, so the earliest table version holding any of them holds exactly that one (binary search)."""
        if len(rows) == 1:
            return rows[0]
        ids = [r["id"] for r in rows]
        versions = sorted(int(v["version"]) for v in self.memories.list_versions())
        lo, hi = 0, len(versions) - 1
        try:
            while lo < hi:
                mid = (lo + hi) // 2
                if self.ids_at(versions[mid], ids):
                    hi = mid
                else:
                    lo = mid + 1
            first = sorted(self.ids_at(versions[lo], ids))
        except Exception:  # those versions were cleaned up: fall back to the lowest id
            first = sorted(ids)
        return next(r for r in rows if r["id"] == first[0])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed(list(texts))

    def _vector_for(self, content: str, vector: Sequence[float] | None) -> list[float]:
        if vector is None:
            return self.embed([content])[0].tolist()
        return check_vector(vector, self.embedder.dimension)

    def _by_hash(self, agent_id: str, digest: str) -> Memory | None:
        rows = self.memories.search().where(f"{eq('content_hash', digest)} AND {eq('agent_id', agent_id)}")
        found = rows.limit(None).to_arrow().to_pylist()
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
    fold_access = access_log.fold_access
    maintain = maintenance.maintain

    # -- the side tables' verbs, as callers know them ----------------------------------------------------
    def record_audit(self, events: Sequence[AuditEvent], *, actor: str, run_id: str | None = None) -> None:
        """See :meth:`AuditLog.record`."""
        self.audit.record(events, actor=actor, run_id=run_id)

    def audit_events(self, memory_id: str) -> list[AuditEvent]:
        """Every audit event of one memory, oldest first."""
        return self.audit.events(memory_id)

    def last_pre_image(self, memory_id: str) -> tuple[Memory, AuditEvent] | None:
        """The pre-image of the newest event that took the row out of recall, and that event."""
        return self.audit.last_pre_image(memory_id)

    def audited(self, memory_ids: Sequence[str], *, action: str, run_id: str) -> set[str]:
        """Which of ``memory_ids`` have an ``action`` event of run ``run_id``."""
        return self.audit.audited(memory_ids, action=action, run_id=run_id)

    def audit_for_agent(
        self,
        agent_id: str,
        *,
        actions: Iterable[str] | None = None,
        memory_ids: Sequence[str] | None = None,
        where: str | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The agent's audit events; see :meth:`AuditLog.for_agent`."""
        return self.audit.for_agent(agent_id, actions=actions, memory_ids=memory_ids, where=where, columns=columns)

    def add_links(self, links: Sequence[Link], *, run_id: str | None = None, keyed: bool = False) -> None:
        """See :meth:`Links.add`."""
        self.links.add(links, run_id=run_id, keyed=keyed)

    def links_of(self, memory_ids: Iterable[str], *, rel: str | None = None) -> list[Link]:
        return self.links.of(memory_ids, rel=rel)

    def links_for_agent(self, agent_id: str | Sequence[str]) -> pa.Table:
        """The links of one agent, or of every agent in a sequence of ids (a sweep)."""
        return self.links.for_agent(agent_id)

    def save_plan(
        self, agent_id: str, body: dict[str, Any], *, kind: str = "corpus_merge", run_id: str | None = None
    ) -> str:
        return self.plans.save(agent_id, body, kind=kind, run_id=run_id)

    def get_plan(self, plan_id: str) -> Plan | None:
        return self.plans.get(plan_id)

    def latest_plan(
        self, agent_id: str, *, kind: str = "corpus_merge", status: PlanStatus | None = None
    ) -> Plan | None:
        return self.plans.latest(agent_id, kind=kind, status=status)

    def plans_of(self, agent_id: str, *, kind: str = "corpus_merge", status: PlanStatus | None = None) -> list[Plan]:
        return self.plans.of(agent_id, kind=kind, status=status)

    def mark_plan_applied(self, plan_id: str, result: dict[str, Any]) -> None:
        self.plans.mark_applied(plan_id, result)

    def close_plan(self, plan_id: str, status: PlanStatus, note: dict[str, Any]) -> bool:
        """See :meth:`Plans.close`."""
        return self.plans.close(plan_id, status, note)

    def get_cursor(self, pass_name: str, agent_id: str) -> dict[str, Any] | None:
        return self.cursors.get(pass_name, agent_id)

    def set_cursor(self, pass_name: str, agent_id: str, cursor: dict[str, Any] | None) -> None:
        self.cursors.set(pass_name, agent_id, cursor)

    def lease_holder(self, key: str) -> str | None:
        return self.cursors.lease_holder(key)

    def swap_lease(self, key: str, expected: str | None, holder: str | None) -> bool:
        return self.cursors.swap_lease(key, expected, holder)

    def log_access(self, rows: Sequence[Memory], *, times: int | Sequence[int] = 1, at: datetime | None = None) -> None:
        """See :meth:`AccessLog.log`."""
        self.access_log.log(rows, times=times, at=at)

    def pending_access(self, agent_id: str | None = None, *, ids: Sequence[str] | None = None) -> pl.DataFrame:
        """See :meth:`AccessLog.pending`."""
        return self.access_log.pending(agent_id, ids=ids)


__all__ = ["AccessFold", "MemoryStore", "RememberResult", "STATUSES"]


def _open_table(db: Any, name: str) -> Any:
    """Table ``name`` of ``db``, or None when it does not exist (LanceDB says so with a ValueError)."""
    try:
        return db.open_table(name)
    except ValueError as exc:
        if "was not found" not in str(exc):
            raise
        return None
