"""What the store's collaborators need of it: the typed internal interface of :class:`~.core.ShardedEngine`.

The modules that carry out the store's verbs (compare-and-set, edits, recall, the write path and its checks,
marks, the access-log fold, maintenance, self-compaction) take an :class:`Engine`, not the class that composes
them, so none of them imports :mod:`.core`, and the store's import graph has no circle, type-only imports
included (the ``acyclic`` contract in ``pyproject.toml``). ``ShardedEngine`` is the one engine; mypy checks that
it satisfies this protocol wherever it hands itself to a collaborator. A member is here because a
collaborator uses it: the public verbs are :class:`~.memory_store.MemoryStore`'s (``docs/library.md``). The
write path (:mod:`engram_pipeline.store.write`) takes a :class:`~engram_pipeline.store.write.cache.Writer`: this
protocol and the write cache the engine holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from engram_pipeline.embed import Embedder
    from engram_pipeline.model import Memory
    from engram_pipeline.settings import Settings
    from engram_pipeline.store.access_log import AccessFold
    from engram_pipeline.store.audit import AuditEvent
    from engram_pipeline.store.links import Link
    from engram_pipeline.store.results import CasResult, Change, Recompute
    from engram_pipeline.store.shards import Shard


class Engine(Protocol):
    """The store as its collaborators see it: settings, shards and the verbs they call on one another."""

    settings: Settings
    embedder: Embedder
    memory_schema: pa.Schema
    shard_count: int
    shards: tuple[Shard, ...]

    # -- placement
    def shard_of(self, agent_id: str) -> int: ...
    def shard_for(self, agent_id: str) -> Shard: ...
    def locate(self, memory_ids: Sequence[str]) -> dict[int, list[str]]: ...
    def tables(self) -> dict[str, Any]: ...
    def _group(self, rows: Sequence[Memory]) -> dict[int, list[Memory]]: ...

    # -- rows
    def get(self, memory_id: str, *, agent_id: str | None = None, track_access: bool = True) -> Memory: ...
    def get_many(self, memory_ids: Sequence[str], *, columns: list[str] | None = None) -> list[Memory]: ...
    def scan_agents(
        self,
        agent_ids: Iterable[str],
        *,
        columns: list[str] | None = None,
        where: str | None = None,
        version: int | None = None,
    ) -> pa.Table: ...
    def new_row(self, agent_id: str, content: str, **fields: Any) -> Memory: ...
    def embed(self, texts: Sequence[str]) -> np.ndarray: ...
    def _vector_for(self, content: str, vector: Sequence[float] | None) -> list[float]: ...
    def _by_hash(self, agent_id: str, digest: str) -> Memory | None: ...
    def _first_committed(self, rows: Sequence[Memory], *, shard: Shard | None = None) -> Memory: ...
    def _drop_lost_races(self, inserted: Sequence[Memory]) -> list[str]: ...
    def ids_at(self, version: int, ids: Sequence[str], *, shard: int = 0) -> list[str]: ...
    def ids_written_at(self, version: int, ids: Sequence[str], token: str, *, shard: int = 0) -> list[str]: ...

    # -- writes
    def cas_write(
        self,
        changes: Sequence[Change],
        *,
        recompute: Recompute | None = None,
        actor: str,
        action: str,
        run_id: str | None = None,
        audit: bool = False,
    ) -> CasResult: ...
    def cas_delete(
        self, expected: dict[str, int], *, actor: str, action: str, run_id: str | None = None
    ) -> CasResult: ...

    # -- side tables
    def record_audit(self, events: Sequence[AuditEvent], *, actor: str, run_id: str | None = None) -> None: ...
    def drop_audit(self, event_ids: Sequence[str], *, shard: int) -> None: ...
    def audit_events(self, memory_id: str) -> list[AuditEvent]: ...
    def last_pre_image(self, memory_id: str) -> tuple[Memory, AuditEvent] | None: ...
    def add_links(self, links: Sequence[Link], *, run_id: str | None = None, keyed: bool = False) -> None: ...
    def links_of(self, memory_ids: Iterable[str], *, rel: str | None = None) -> list[Link]: ...
    def drop_links(self, agent_id: str, *, src_id: str, dst_id: str, rel: str) -> None: ...
    def log_access(
        self, rows: Sequence[Memory], *, times: int | Sequence[int] = 1, at: datetime | None = None
    ) -> None: ...
    def record_access(
        self, rows: Sequence[Memory], *, times: int = 1, at: datetime | None = None, shard: int | None = None
    ) -> int: ...
    def fold_access(
        self, agent_id: str | Sequence[str] | None = None, *, now: datetime | None = None, reindex: bool = True
    ) -> AccessFold: ...
