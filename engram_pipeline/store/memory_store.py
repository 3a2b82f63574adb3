"""``MemoryStore``: the public store, the verbs an agent uses, over one :class:`~.core.ShardedEngine`.

>>> from engram_pipeline.settings import Settings
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> r = store.remember("alice", "User prefers dark mode")
>>> r.outcome, store.get(r.memory["id"])["version"]
('created', 1)

Each verb here is the engine's (or the module function it binds), called on :attr:`MemoryStore.engine`; the
signatures are written out so that a reader, an editor and ``docs/library.md`` see the whole surface. What the
passes, the shells and the tests need beyond it (scans, compare-and-set batches, cursors, leases, audit reads,
plans, links, the tables) is the engine's, ``store.engine``: an internal interface that may change between
releases.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Unpack

from engram_pipeline.store import edits
from engram_pipeline.store.core import ShardedEngine
from engram_pipeline.store.maintain import maintain as _maintain
from engram_pipeline.store.recall import recall as _recall

if TYPE_CHECKING:
    from engram_pipeline.embed import Embedder
    from engram_pipeline.model import Memory, MemoryChanges, PlacedMemory
    from engram_pipeline.settings import Settings
    from engram_pipeline.store.audit import AuditEvent
    from engram_pipeline.store.maintain import MaintenanceReport
    from engram_pipeline.store.recall import RecallHit
    from engram_pipeline.store.results import RememberResult


class MemoryStore:
    """The memory store. Open it with :meth:`open`; every write is a compare-and-set on ``version``, and a verb
    given bad input raises :class:`~engram_pipeline.store.errors.InvalidInput` and changes nothing."""

    engine: ShardedEngine  # the passes' interface (internal): tables, scans, batches, cursors, leases, ...

    def __init__(self, engine: ShardedEngine) -> None:
        self.engine = engine

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
    ) -> MemoryStore:
        """Open (or create) the store at a LanceDB ``uri``: a directory, ``memory://``, ``s3://...``, ...

        ``uri`` defaults to ``settings.resolved_db_uri``; a local path is made absolute. ``storage_options``
        default to ``ENGRAM_STORAGE_OPTIONS`` and are passed to LanceDB for object storage. With
        ``create=False`` a store that does not exist yet raises :class:`StoreNotFound` instead of being created.
        A store made with another shard count raises :class:`ShardCountMismatch`, one a re-shard left half-way
        :class:`MigrationInProgress` (``migrating=True`` is for :mod:`engram_pipeline.store.migrate` alone).
        """
        return cls(
            ShardedEngine.open(
                uri,
                settings=settings,
                embedder=embedder,
                storage_options=storage_options,
                create=create,
                migrating=migrating,
            )
        )

    @property
    def settings(self) -> Settings:
        """The settings the store runs with (the embedder's threshold profile applied)."""
        return self.engine.settings

    @property
    def embedder(self) -> Embedder:
        """The embedder the store was made with (recorded in its ``meta`` table)."""
        return self.engine.embedder

    @property
    def uri(self) -> str:
        """Where the store lives (a local path is absolute)."""
        return self.engine.uri

    @property
    def shard_count(self) -> int:
        """How many shards the store has (``ENGRAM_SHARDS`` when it was made)."""
        return self.engine.shard_count

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
        ``engram_pipeline.store.write``) and the row is inserted with outcome ``created``. Concurrent calls
        share a batch, one commit and one embedding call (:mod:`~engram_pipeline.store.write.commit`).
        """
        return self.engine.remember(
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
            vector=vector,
            actor=actor,
        )

    async def remember_async(
        self,
        agent_id: str,
        content: str,
        *,
        vector: Sequence[float] | None = None,
        actor: str = "library",
        **fields: Unpack[PlacedMemory],
    ) -> RememberResult:
        """:meth:`remember` for a coroutine (the HTTP API's), with the same keyword arguments
        (``model.PlacedMemory``, whose defaults are :meth:`remember`'s): the row is validated at once, then the
        coroutine awaits its batch's commit without holding a thread."""
        return await self.engine.remember_async(agent_id, content, vector=vector, actor=actor, **fields)

    def update(
        self,
        memory_id: str,
        *,
        expected_version: int,
        actor: str = "library",
        agent_id: str | None = None,
        **changes: Unpack[MemoryChanges],
    ) -> Memory:
        """Change fields of one memory if it is still at ``expected_version``; raises :class:`VersionConflict`.

        Changing ``content`` re-embeds and re-hashes it. Updatable: ``content``, ``tags``, ``importance``,
        ``confidence``, ``pinned``, ``kind``, ``tier``, ``outcome``, ``source``, ``metadata`` (a dict).
        """
        return edits.update(
            self.engine, memory_id, expected_version=expected_version, actor=actor, agent_id=agent_id, **changes
        )

    def delete(self, memory_id: str, *, expected_version: int | None = None, actor: str = "library") -> None:
        """Delete one memory (audited with its full pre-image, so :meth:`restore` can bring it back)."""
        edits.delete(self.engine, memory_id, expected_version=expected_version, actor=actor)

    def restore(self, memory_id: str, *, expected_version: int | None = None, actor: str = "library") -> Memory:
        """Bring back a pruned, merged, superseded, archived or deleted row from its audit pre-image, with its
        id and every field it had; refused (:class:`RestoreConflict`) where that would revert a later change.
        The rules: :func:`engram_pipeline.store.edits.restore`."""
        return edits.restore(self.engine, memory_id, expected_version=expected_version, actor=actor)

    # -- reads -----------------------------------------------------------------------------------------
    def recall(
        self,
        agent_id: str,
        query: str | None = None,
        *,
        vector: Sequence[float] | None = None,
        k: int = 10,
        include_superseded: bool = False,
        include_archived: bool = False,
        tiers: Sequence[str] | None = None,
        min_confidence: float | None = None,
        track_access: bool = True,
        now: datetime | None = None,
        with_vectors: bool = True,
        evidence: int = 3,
    ) -> list[RecallHit]:
        """The ``k`` best memories of ``agent_id`` for a ``query`` text or a ``vector`` (exactly one).

        ``evidence`` (0..10) bounds the sources attached to each derived hit; 0 attaches none.
        ``with_vectors=False`` leaves ``vector`` (and the internal ``write_token``) out of the returned rows.
        The ranking: :mod:`engram_pipeline.store.recall`.
        """
        return _recall(
            self.engine,
            agent_id,
            query,
            vector=vector,
            k=k,
            include_superseded=include_superseded,
            include_archived=include_archived,
            tiers=tiers,
            min_confidence=min_confidence,
            track_access=track_access,
            now=now,
            with_vectors=with_vectors,
            evidence=evidence,
        )

    def get(self, memory_id: str, *, agent_id: str | None = None, track_access: bool = True) -> Memory:
        """The row with this id, whatever its status. Raises :class:`MemoryNotFound`.

        With ``agent_id`` the row must belong to that agent (else it is reported as not found); ``track_access``
        logs this read.
        """
        return self.engine.get(memory_id, agent_id=agent_id, track_access=track_access)

    def get_many(self, memory_ids: Sequence[str], *, columns: list[str] | None = None) -> list[Memory]:
        """The rows of these ids that exist (any order, any status), with ``columns`` only if given."""
        return self.engine.get_many(memory_ids, columns=columns)

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
        return self.engine.list_memories(agent_id, status=status, tier=tier, kind=kind, tag=tag, limit=limit)

    def count(self, agent_id: str | None = None, *, where: str | None = None) -> int:
        """How many rows (of ``agent_id``, passing ``where``, extra SQL the caller has quoted) there are."""
        return self.engine.count(agent_id, where=where)

    def agents(self) -> list[str]:
        """Every agent id that has at least one memory (in any shard)."""
        return self.engine.agents()

    def audit_events(self, memory_id: str) -> list[AuditEvent]:
        """Every audit event of one memory, oldest first: its history, each with the pre-image it replaced."""
        return self.engine.audit_events(memory_id)

    # -- housekeeping ----------------------------------------------------------------------------------
    def maintain(self, *, keep: timedelta = timedelta(hours=1), attempts: int = 1000) -> MaintenanceReport:
        """Fold the access log, compact every table, clean up versions older than ``keep`` and rebuild the
        indexes; never raises because of concurrent writers (:func:`engram_pipeline.store.maintain.maintain`)."""
        return _maintain(self.engine, keep=keep, attempts=attempts)


__all__ = ["MemoryStore"]
