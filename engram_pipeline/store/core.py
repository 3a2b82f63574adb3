"""``MemoryStore``: the memory tables on LanceDB, and the verbs agents and passes use on them.

>>> from engram_pipeline.settings import Settings
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> r = store.remember("alice", "User prefers dark mode")
>>> r.outcome, store.get(r.memory["id"])["version"]
('created', 1)
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import BTree

from engram_pipeline.embed import Embedder, get_embedder
from engram_pipeline.model import (
    AUDIT_SCHEMA,
    CURSOR_SCHEMA,
    KINDS,
    LINK_SCHEMA,
    META_SCHEMA,
    OUTCOMES,
    PLAN_SCHEMA,
    SCHEMA_VERSION,
    SOURCE_CONFIDENCE,
    SOURCES,
    STATUSES,
    Memory,
    content_hash,
    dumps_metadata,
    memory_schema,
    rows_to_table,
    utcnow,
)
from engram_pipeline.settings import Settings
from engram_pipeline.store.cas import CasResult, Change, Recompute, _with_retry, cas_delete, cas_write
from engram_pipeline.store.errors import (
    EmbedderMismatch,
    InvalidInput,
    MemoryNotFound,
    NothingToRestore,
    VersionConflict,
)
from engram_pipeline.store.records import RecordsMixin
from engram_pipeline.store.sql import eq, in_list, lit

# Words that mark a memory as time-bound: ``tier="auto"`` routes such content to short-term memory.
TIME_WORDS = re.compile(
    r"\b(today|tonight|tomorrow|yesterday|this (morning|afternoon|evening|week)|right now|for now|"
    r"currently|at the moment|temporarily|later today|in an? (hour|minute)|in \d+ (minutes|hours)|"
    r"next (hour|meeting)|until (tonight|tomorrow))\b",
    re.IGNORECASE,
)
# BTree indexes on the columns every filter starts with.
SCALAR_INDEXES = ("agent_id", "id", "content_hash")
# Columns a caller may change through ``update``; the rest belong to the store or to passes.
UPDATABLE = frozenset(
    {"content", "tags", "importance", "confidence", "pinned", "kind", "tier", "outcome", "metadata", "source"}
)


@dataclass(frozen=True)
class RememberResult:
    memory: Memory
    outcome: str  # "created" | "exact_duplicate" | "semantic_duplicate"
    score: float | None = None  # similarity to the matched row of a semantic duplicate
    contradictions: tuple[dict[str, Any], ...] = field(default=())


class MemoryStore(RecordsMixin):
    """The memory store. Open it with :meth:`open`; every write is a compare-and-set on ``version``."""

    def __init__(self, db: Any, uri: str, settings: Settings, embedder: Embedder) -> None:
        self.db = db
        self.uri = uri
        self.embedder = embedder
        self.settings = settings.with_profile(embedder.profile)
        self.memory_schema = memory_schema(embedder.dimension)
        existing = set(db.list_tables().tables)
        self.meta = self._table("meta", META_SCHEMA, existing)
        self._check_meta()
        self.memories = self._table("memories", self.memory_schema, existing)
        self.links = self._table("links", LINK_SCHEMA, existing)
        self.audit = self._table("audit", AUDIT_SCHEMA, existing)
        self.plans = self._table("plans", PLAN_SCHEMA, existing)
        self.cursors = self._table("cursors", CURSOR_SCHEMA, existing)
        if "memories" not in existing:
            self._create_scalar_indexes()

    @classmethod
    def open(
        cls,
        uri: str | None = None,
        *,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> MemoryStore:
        """Open (or create) the store at a LanceDB ``uri``: a directory, ``memory://``, ``s3://...``, ...

        ``uri`` defaults to ``settings.resolved_db_uri``; ``storage_options`` default to
        ``ENGRAM_STORAGE_OPTIONS`` and are passed to LanceDB for object storage.
        """
        settings = settings or Settings.from_env()
        uri = uri or settings.resolved_db_uri
        if "://" not in uri:
            from pathlib import Path

            Path(uri).mkdir(parents=True, exist_ok=True)
        options = storage_options if storage_options is not None else settings.storage_options_dict
        # Strong read consistency: every read sees the latest commit of any process, which the
        # compare-and-set protocol and concurrent passes rely on.
        db = lancedb.connect(uri, read_consistency_interval=timedelta(0), storage_options=options or None)
        return cls(db, uri, settings, embedder or get_embedder(settings))

    # -- tables ----------------------------------------------------------------------------------------
    def _table(self, name: str, schema: pa.Schema, existing: set[str]) -> Any:
        if name in existing:
            return self.db.open_table(name)
        return self.db.create_table(name, schema=schema, exist_ok=True)

    def _check_meta(self) -> None:
        rows = {r["key"]: r["value"] for r in self.meta.to_arrow().to_pylist()}
        name, dim = self.embedder.name, self.embedder.dimension
        if "embedder" not in rows:
            table = rows_to_table(
                [
                    {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                    {"key": "embedder", "value": name},
                    {"key": "dimension", "value": str(dim)},
                ],
                META_SCHEMA,
            )
            _with_retry(lambda: self.meta.merge_insert("key").when_not_matched_insert_all().execute(table))
            rows = {r["key"]: r["value"] for r in self.meta.to_arrow().to_pylist()}
        if rows["embedder"] != name or int(rows["dimension"]) != dim:
            raise EmbedderMismatch(self.uri, rows["embedder"], int(rows["dimension"]), name, dim)
        if int(rows.get("schema_version", SCHEMA_VERSION)) != SCHEMA_VERSION:
            raise InvalidInput(
                f"the store at {self.uri} has schema version {rows['schema_version']}; "
                f"this release reads version {SCHEMA_VERSION}"
            )

    def _create_scalar_indexes(self) -> None:
        for column in SCALAR_INDEXES:
            self.memories.create_index(column, config=BTree(), replace=True)

    # -- reads -----------------------------------------------------------------------------------------
    def get(self, memory_id: str, *, agent_id: str | None = None, track_access: bool = True) -> Memory:
        """The row with this id, whatever its status. Raises :class:`MemoryNotFound`.

        With ``agent_id`` the row must belong to that agent (else it is reported as not found).
        """
        rows = self.get_many([memory_id])
        if not rows or (agent_id is not None and rows[0]["agent_id"] != agent_id):
            raise MemoryNotFound(memory_id)
        row = rows[0]
        if track_access:
            self.record_access([row])
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

    def scan(self, agent_id: str, *, columns: list[str] | None = None, where: str | None = None) -> pa.Table:
        """All rows of one agent as an Arrow table (``where`` is extra SQL the caller has quoted)."""
        cond = eq("agent_id", agent_id) + (f" AND ({where})" if where else "")
        q = self.memories.search().where(cond)
        if columns:
            q = q.select(columns)
        return q.limit(None).to_arrow()

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
        existing = self._by_hash(agent_id, row["content_hash"])
        if existing is not None:
            return RememberResult(existing, "exact_duplicate")
        row["vector"] = self._vector_for(content, vector)
        from engram_pipeline.store import write_path

        return write_path.remember_row(self, row, actor=actor)

    def new_row(
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
        last_accessed_at: datetime | None = None,
        access_count: int = 0,
    ) -> Memory:
        """Validate the fields of a new memory and build its row (without a vector). Raises InvalidInput."""
        if not isinstance(agent_id, str) or not agent_id.strip():
            raise InvalidInput("agent_id must be a non-empty string")
        if not isinstance(content, str) or not content.strip():
            raise InvalidInput("content must be a non-empty string")
        size = len(content.encode())
        if size > self.settings.max_content_bytes:
            raise InvalidInput(f"content is {size} bytes; the limit is {self.settings.max_content_bytes}")
        _one_of("kind", kind, KINDS)
        _one_of("source", source, SOURCES)
        _one_of("tier", tier, ("stm", "ltm", "auto"))
        if outcome is not None:
            _one_of("outcome", outcome, OUTCOMES)
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise InvalidInput("tags must be a list of strings")
        for name, value in (("importance", importance), ("confidence", confidence)):
            if value is not None and not 0.0 <= float(value) <= 1.0:
                raise InvalidInput(f"{name} must be within [0, 1], got {value}")
        if ttl_s is not None and ttl_s <= 0:
            raise InvalidInput(f"ttl_s must be positive, got {ttl_s}")
        now = utcnow()
        created = created_at or now
        if tier == "auto":
            tier = "stm" if ttl_s is not None or TIME_WORDS.search(content) else "ltm"
        expires = created + timedelta(seconds=ttl_s or self.settings.stm_ttl_s) if tier == "stm" else None
        return {
            "id": memory_id or uuid.uuid4().hex,
            "agent_id": agent_id,
            "tier": tier,
            "kind": kind,
            "content": content,
            "content_hash": content_hash(agent_id, content),
            "tags": sorted(dict.fromkeys(tags)),
            "source": source,
            "outcome": outcome,
            "importance": 0.5 if importance is None else float(importance),
            "importance_factors": None,
            "confidence": SOURCE_CONFIDENCE.get(source, 0.5) if confidence is None else float(confidence),
            "access_count": access_count,
            "reinforcement_count": 0,
            "pinned": bool(pinned),
            "status": "active",
            "superseded_by": None,
            "contradiction_with": [],
            "created_at": created,
            "updated_at": now,
            "last_accessed_at": last_accessed_at,
            "decayed_at": None,
            "expires_at": expires,
            "version": 1,
            "write_token": None,
            "metadata": dumps_metadata(metadata or {}),
        }

    def insert_rows(self, rows: Sequence[Memory]) -> list[str]:
        """Insert new rows in one commit, skipping any whose (agent, content) already exists. Returns the
        ids inserted. The insert is a ``merge_insert`` on ``content_hash``, so concurrent writers of the same
        content cannot both insert it."""
        if not rows:
            return []
        unique = list({r["content_hash"]: r for r in rows}.values())
        table = rows_to_table(unique, self.memory_schema)
        result = _with_retry(
            lambda: self.memories.merge_insert("content_hash").when_not_matched_insert_all().execute(table)
        )
        if result.num_inserted_rows == len(unique):
            return [r["id"] for r in unique]
        present = {r["id"] for r in self.get_many([r["id"] for r in unique], columns=["id"])}
        return [r["id"] for r in unique if r["id"] in present]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed(list(texts))

    def _vector_for(self, content: str, vector: Sequence[float] | None) -> list[float]:
        if vector is None:
            return self.embed([content])[0].tolist()
        with np.errstate(over="ignore"):  # an out-of-range component becomes inf and is refused below
            arr = np.asarray(vector, dtype=np.float32)
        if arr.shape != (self.embedder.dimension,):
            raise InvalidInput(f"vector has dimension {arr.size}; this store uses {self.embedder.dimension}")
        if not np.isfinite(arr).all():
            raise InvalidInput("vector contains NaN or infinite values")
        return arr.tolist()

    def _by_hash(self, agent_id: str, digest: str) -> Memory | None:
        rows = self.memories.search().where(f"{eq('content_hash', digest)} AND {eq('agent_id', agent_id)}")
        found = rows.limit(1).to_arrow().to_pylist()
        return found[0] if found else None

    def update(
        self,
        memory_id: str,
        *,
        expected_version: int,
        actor: str = "library",
        agent_id: str | None = None,
        **changes: Any,
    ) -> Memory:
        """Change fields of one memory if it is still at ``expected_version``; raises :class:`VersionConflict`.

        Changing ``content`` re-embeds and re-hashes it. Updatable: ``content``, ``tags``, ``importance``,
        ``confidence``, ``pinned``, ``kind``, ``tier``, ``outcome``, ``source``, ``metadata`` (a dict).
        """
        unknown = set(changes) - UPDATABLE
        if unknown:
            raise InvalidInput(f"cannot update {', '.join(sorted(unknown))}; updatable: {', '.join(sorted(UPDATABLE))}")
        if not changes:
            raise InvalidInput("nothing to update")
        current = self.get(memory_id, agent_id=agent_id, track_access=False)
        if current["version"] != expected_version:
            raise VersionConflict(memory_id, expected=expected_version, current=current["version"])
        merged: Memory = {**current, **changes}
        probe = self.new_row(
            current["agent_id"],
            merged["content"],
            tier=merged["tier"],
            kind=merged["kind"],
            tags=merged["tags"] or [],
            source=merged["source"] or "agent",
            outcome=merged["outcome"],
            importance=changes.get("importance"),
            confidence=changes.get("confidence"),
        )
        change: Change = {"id": memory_id, "version": expected_version}
        for key, value in changes.items():
            if key == "metadata":
                if not isinstance(value, dict):
                    raise InvalidInput("metadata must be an object")
                value = json.dumps(value, sort_keys=True)
            elif key == "tags":
                value = probe["tags"]
            change[key] = value
        if "content" in changes:
            change["content_hash"] = probe["content_hash"]
            change["vector"] = self._vector_for(changes["content"], None)
        result = cas_write(self, [change], actor=actor, action="update")
        if not result.applied:
            now = self.get_many([memory_id], columns=["id", "version"])
            raise VersionConflict(memory_id, expected=expected_version, current=now[0]["version"] if now else None)
        after = self.get(memory_id, track_access=False)
        self.record_audit(
            [
                {
                    "memory_id": memory_id,
                    "agent_id": after["agent_id"],
                    "action": "update",
                    "before": current,
                    "after": after,
                }
            ],
            actor=actor,
        )
        return after

    def cas_write(
        self,
        changes: Sequence[Change],
        *,
        recompute: Recompute | None = None,
        actor: str,
        action: str,
        run_id: str | None = None,
        audit: bool = False,
    ) -> CasResult:
        """Batched compare-and-set for passes: see :mod:`engram_pipeline.store.cas`."""
        return cas_write(self, changes, recompute=recompute, actor=actor, action=action, run_id=run_id, audit=audit)

    def cas_delete(self, expected: dict[str, int], *, actor: str, action: str, run_id: str | None = None) -> CasResult:
        """Delete rows still at their expected versions, in one commit, auditing their pre-images."""
        return cas_delete(self, expected, actor=actor, action=action, run_id=run_id)

    def delete(self, memory_id: str, *, expected_version: int | None = None, actor: str = "library") -> None:
        """Delete one memory (audited with its full pre-image, so ``restore`` can bring it back)."""
        current = self.get(memory_id, track_access=False)
        expected = current["version"] if expected_version is None else expected_version
        result = self.cas_delete({memory_id: expected}, actor=actor, action="delete")
        if not result.applied:
            now = self.get_many([memory_id], columns=["id", "version"])
            raise VersionConflict(memory_id, expected=expected, current=now[0]["version"] if now else None)

    def restore(self, memory_id: str, *, actor: str = "library") -> Memory:
        """Bring back a pruned, merged, superseded, archived or deleted row from its audit pre-image.

        The row returns with its original id and every field of the pre-image; its ``version`` moves on
        from the current one (versions never go backwards), so concurrent holders of the old version are
        refused rather than silently overwritten.
        """
        found = self.last_pre_image(memory_id)
        if found is None:
            raise NothingToRestore(memory_id)
        image, _event = found
        current = self.get_many([memory_id])
        if current:
            row = current[0]
            change = {k: v for k, v in image.items() if k not in ("id", "version", "write_token", "updated_at")}
            change.update(id=memory_id, version=row["version"])
            result = cas_write(self, [change], actor=actor, action="restore")
            if not result.applied:
                raise VersionConflict(memory_id, expected=row["version"], current=None)
            before: Memory | None = row
        else:
            restored = {**image, "version": image["version"] + 1}
            table = rows_to_table([restored], self.memory_schema)
            _with_retry(lambda: self.memories.merge_insert("id").when_not_matched_insert_all().execute(table))
            before = None
        after = self.get(memory_id, track_access=False)
        self.record_audit(
            [
                {
                    "memory_id": memory_id,
                    "agent_id": after["agent_id"],
                    "action": "restore",
                    "before": before,
                    "after": after,
                }
            ],
            actor=actor,
        )
        return after

    def record_access(self, rows: Sequence[Memory], *, times: int = 1, at: datetime | None = None) -> None:
        """Access bookkeeping: +``times`` accesses and ``last_accessed_at`` for rows still at the version read.

        One commit for all rows; it never bumps ``version`` (it is not an edit), and a row whose version moved
        meanwhile is left alone. ``times``/``at`` let a deferred recorder (the API's) fold many reads into one
        commit.
        """
        if not rows:
            return
        cond = " OR ".join(f"(id = {lit(r['id'])} AND version = {int(r['version'])})" for r in rows)
        now = at or utcnow()
        _with_retry(
            lambda: self.memories.update(
                where=cond,
                values_sql={"access_count": f"access_count + {int(times)}", "last_accessed_at": _ts_sql(now)},
            )
        )

    # -- recall ----------------------------------------------------------------------------------------
    def recall(self, agent_id: str, query: str | None = None, **options: Any) -> list[Any]:
        """Ranked recall for one agent; see :func:`engram_pipeline.recall.recall` for the options."""
        from engram_pipeline.recall import recall

        return recall(self, agent_id, query, **options)

    def maintain(self, **options: Any) -> Any:
        """Compact the tables and clean up old versions; see :func:`engram_pipeline.store.maintenance.maintain`."""
        from engram_pipeline.store.maintenance import maintain

        return maintain(self, **options)


def _one_of(name: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise InvalidInput(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _ts_sql(ts: datetime) -> str:
    return f"arrow_cast({lit(ts.isoformat())}, 'Timestamp(Microsecond, Some(\"UTC\"))')"


__all__ = ["MemoryStore", "RememberResult", "STATUSES"]
