"""What every lifecycle pass shares: run ids, reading an agent as a polars frame, and resumable cursors.

A pass reads one agent's rows column-wise, computes its changes with polars/numpy, and writes them through
the store's batched compare-and-set in batches ordered by id (the loop is
:func:`engram_pipeline.lifecycle._batched.run_batched`). After each batch it advances its cursor
(``cursors`` table, key ``<pass>/<agent>``). A run that was killed leaves an unfinished cursor; the next run
of that pass for that agent resumes after the last committed id **with the same ``now``**, so the end state
equals that of an uninterrupted run, and rows already written are not written again (their version moved,
and a recomputation finds nothing left to change).

One run at a time per (pass, agent): :meth:`PassCursor.start` first takes a :class:`Lease` (a compare-and-set
row in the ``cursors`` table, see :mod:`engram_pipeline.lifecycle._lease`). A second run waits for it (up to
``LEASE_WAIT``, then :class:`PassBusy`), so two runs started together never both do the work; the report's
``cursor`` says how long it waited. The holder renews the lease from a daemon thread while its pass runs; a
lease whose holder is gone (its process died on this host, or it expired after ``LEASE_TTL`` without renewal)
is taken over, and the cursor says so (``lease_taken_over``).

A pass with nothing to do commits nothing. :meth:`PassCursor.deferred` reads the saved cursor and, unless a
killed run is to be resumed (then it is :meth:`PassCursor.start`), takes neither the lease nor a cursor row:
the pass decides its work from what is stored, and only a run that will write calls :meth:`PassCursor.begin`
(``run_batched`` does, before its first batch), which takes the lease and saves the cursor. An idle run
leaves no cursor, lease, audit or table version behind; two idle runs together write nothing, so there is
nothing for a lease to keep apart. If another run of the pass began between this run's look and its lease,
``begin`` says so (``stale``) and the pass decides again under the lease, from the rows as that run left them.
"""

from __future__ import annotations

import hashlib
import sys
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from engram_pipeline.lifecycle._lease import Lease, LeaseLost, PassBusy, _running_check
from engram_pipeline.model import utcnow
from engram_pipeline.store.sharding import by_shard, shard_scope
from engram_pipeline.store.sql import lit

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

__all__ = [
    "CONSOLIDATION_ACTOR", "Lease", "LeaseLost", "PassBusy", "PassCursor", "agent_frame", "new_run_id", "sweep_key",
]  # fmt: skip

# The actor of every consolidation stage's writes (beliefs, procedures, schemas, archival) in the audit.
CONSOLIDATION_ACTOR = "consolidation"


def new_run_id(pass_name: str) -> str:
    return f"{pass_name}-{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def sweep_key(agent_ids: Sequence[str], shards: int) -> tuple[str, dict[str, Any] | None]:
    """The cursor key and scope of a run over ``agent_ids``, which must all be in one shard of ``shards``.

    One agent's run is keyed by the agent, as the per-agent pass is (a sweep of one agent *is* that pass);
    several agents share one cursor row per shard, ``shard/<k>-of-<n>`` (no agent id holds a ``/``), whose
    scope is a digest of the sorted agent list: a killed sweep resumes for the same agents, and a sweep of
    another list closes it as ``abandoned_for`` (see :meth:`PassCursor.start`).

    >>> sweep_key(["a"], 1)
    ('a', None)
    >>> key, scope = sweep_key(["b", "a", "a"], 1)
    >>> key, scope["count"]
    ('shard/0-of-1', 2)
    """
    groups = by_shard(agent_ids, shards)
    if len(groups) != 1:
        raise ValueError(f"a sweep runs over the agents of one shard, not {len(groups)}: group them with by_shard")
    [(shard, agents)] = groups.items()
    if len(agents) == 1:
        return agents[0], None
    digest = hashlib.blake2b("\0".join(agents).encode("utf-8"), digest_size=12).hexdigest()
    return shard_scope(shard, shards), {"agents": digest, "count": len(agents)}


def agent_frame(
    store: MemoryStore,
    agent_id: str | Sequence[str],
    columns: list[str] | None = None,
    where: str | None = None,
    *,
    version: int | None = None,
) -> pl.DataFrame:
    """One agent's rows, or those of a sequence of agents (a sweep's one read), optionally only ``columns`` and
    as of table ``version``, as a polars frame sorted by id."""
    if isinstance(agent_id, str):
        table = store.engine.scan(agent_id, columns=columns, where=where, version=version)
    else:
        table = store.engine.scan_agents(agent_id, columns=columns, where=where, version=version)
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df.sort("id") if "id" in df.columns else df


@dataclass
class PassCursor:
    """Resumable progress of one pass over one agent, or over a sweep's set of agents.

    ``agent_id`` is the cursor's key: an agent id, or for a sweep over several agents a scope name that no agent
    id can be (:func:`sweep_key`, say ``shard/3-of-8``: ids never hold a ``/``), so a sweep keeps one cursor row
    per shard and run. ``agents`` are the agents whose rows the run reads (default: ``agent_id`` alone).
    """

    store: MemoryStore
    pass_name: str
    agent_id: str
    state: dict[str, Any] = field(default_factory=dict)
    lease: Lease | None = None
    stale: bool = False  # begin() found that another run began after this one read the saved cursor
    agents: tuple[str, ...] = ()
    _finalizer: Any = field(default=None, init=False, repr=False, compare=False)
    _deferred: tuple[Any, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def start(
        cls,
        store: MemoryStore,
        pass_name: str,
        agent_id: str,
        *,
        now: datetime | None = None,
        run_id: str | None = None,
        scope: dict[str, Any] | None = None,
        agents: Sequence[str] = (),
    ) -> PassCursor:
        """Take the (pass, agent) lease, then resume an unfinished run of this pass (keeping its ``now`` and run
        id), or begin a new one. Raises :class:`PassBusy` when another run holds the lease past ``LEASE_WAIT``.

        ``scope`` says what the run works on (say ``{"plan_id": ...}``); it is saved before the run's first
        commit, and an unfinished run of another scope is closed as ``abandoned_for`` instead of resumed.
        Call it from the pass function itself: the lease is held while that function runs (see :class:`Lease`).
        """
        cursor = cls._start(store, pass_name, agent_id, now, run_id, scope, _running_check(sys._getframe(1)))
        cursor.agents = tuple(agents)
        return cursor

    @classmethod
    def deferred(
        cls,
        store: MemoryStore,
        pass_name: str,
        agent_id: str,
        *,
        now: datetime | None = None,
        run_id: str | None = None,
        scope: dict[str, Any] | None = None,
        agents: Sequence[str] = (),
    ) -> PassCursor:
        """Like :meth:`start`, but a new run takes the lease and saves its cursor only at :meth:`begin`, before
        its first write (see the module docstring): a run that finds nothing to do writes nothing. A killed run
        to resume, or one of another ``scope`` to close, is started at once, as :meth:`start` does."""
        running = _running_check(sys._getframe(1))
        saved = store.engine.get_cursor(pass_name, agent_id)
        if saved and not saved.get("done"):
            cursor = cls._start(store, pass_name, agent_id, now, run_id, scope, running)
        else:
            cursor = cls(store, pass_name, agent_id, cls._new_state(store, pass_name, agent_id, now, run_id, scope))
            cursor._deferred = (saved, running)
        cursor.agents = tuple(agents)
        return cursor

    @property
    def scanned(self) -> str | tuple[str, ...]:
        """What the run reads: its agent, or its sweep's agents."""
        return self.agents or self.agent_id

    @property
    def pending(self) -> bool:
        """A deferred run that has not begun: it holds no lease and has written no cursor."""
        return self._deferred is not None

    def begin(self) -> None:
        """Before a deferred run's first write: take the lease and save the cursor (no-op once begun, and for
        a cursor from :meth:`start`). Sets :attr:`stale` when another run of the pass began after this run
        read the saved cursor: what this run decided from the rows then is to be decided again."""
        if self._deferred is None:
            return
        seen, running = self._deferred
        lease = Lease.acquire(self.store, f"{self.pass_name}/{self.agent_id}", running=running)
        try:
            saved = self.store.engine.get_cursor(self.pass_name, self.agent_id)
            self.stale = saved != seen
            if self.stale:  # rows may have moved under that run: the run starts from the table as it is now
                version = self.store.engine.memories_version(self.agent_id)
                self.state["memories_version"] = self.state["started_version"] = version
            self.store.engine.set_cursor(self.pass_name, self.agent_id, self.state)
        except BaseException:
            lease.release()
            raise
        self._deferred = None
        self.lease = lease
        self._finalizer = weakref.finalize(self, lease.abandon)

    @classmethod
    def _new_state(
        cls,
        store: MemoryStore,
        pass_name: str,
        agent_id: str,
        now: datetime | None,
        run_id: str | None,
        scope: Any,
    ) -> dict[str, Any]:
        version = store.engine.memories_version(agent_id)  # the agent's shard's table: what ``scan(version=)`` reads
        return {
            "scope": scope,
            "run_id": run_id or new_run_id(pass_name),
            "now": (now or utcnow()).isoformat(),
            "after": None,
            "done": False,
            "batches": 0,
            "resumed": 0,
            "memories_version": version,
            "started_version": version,
        }

    @classmethod
    def _start(
        cls,
        store: MemoryStore,
        pass_name: str,
        agent_id: str,
        now: datetime | None,
        run_id: str | None,
        scope: dict[str, Any] | None,
        running: Any,
    ) -> PassCursor:
        lease = Lease.acquire(store, f"{pass_name}/{agent_id}", running=running)
        try:
            saved = store.engine.get_cursor(pass_name, agent_id)
            if saved and not saved.get("done") and scope is not None and saved.get("scope") != scope:
                store.engine.set_cursor(pass_name, agent_id, {**saved, "done": True, "abandoned_for": scope})
                saved = None
        except BaseException:
            lease.release()
            raise
        if saved and not saved.get("done"):
            saved["resumed"] = int(saved.get("resumed", 0)) + 1
            return cls._held(store, pass_name, agent_id, saved, lease)
        state = cls._new_state(store, pass_name, agent_id, now, run_id, scope)
        cursor = cls._held(store, pass_name, agent_id, state, lease)
        store.engine.set_cursor(pass_name, agent_id, state)
        return cursor

    @classmethod
    def _held(
        cls, store: MemoryStore, pass_name: str, agent_id: str, state: dict[str, Any], lease: Lease
    ) -> PassCursor:
        cursor = cls(store, pass_name, agent_id, state, lease)
        # A run that raised gives the lease back (through its heartbeat) once its cursor is garbage or its pass
        # frame has left the stack; a killed process leaves it to be taken over (dead pid here, or expiry).
        cursor._finalizer = weakref.finalize(cursor, lease.abandon)
        return cursor

    @property
    def now(self) -> datetime:
        return datetime.fromisoformat(self.state["now"])

    @property
    def run_id(self) -> str:
        return str(self.state["run_id"])

    @property
    def started_version(self) -> int | None:
        """The ``memories`` table version when the run began (its first attempt)."""
        version = self.state.get("started_version")
        return None if version is None else int(version)

    @property
    def after(self) -> str | None:
        return self.state.get("after")

    def advance(self, last_id: str, **counts: int) -> None:
        """Record that every id up to ``last_id`` is done (call after the batch's commit)."""
        self.begin()
        self.state["after"] = last_id
        self.state["batches"] = int(self.state.get("batches", 0)) + 1
        self.state["memories_version"] = self.store.engine.memories_version(self.agent_id)
        totals = self.state.setdefault("counts", {})
        for key, value in counts.items():
            totals[key] = int(totals.get(key, 0)) + int(value)
        if self.lease is not None:
            self.lease.check()
        self.store.engine.set_cursor(self.pass_name, self.agent_id, self.state)

    def record(self, **counts: int) -> None:
        """Add ``counts`` to the run's totals without moving past any id (a resumed run's recount of what a
        killed attempt wrote), so that a later resume counts only from here."""
        self.begin()
        self.state["memories_version"] = self.store.engine.memories_version(self.agent_id)
        totals = self.state.setdefault("counts", {})
        for key, value in counts.items():
            totals[key] = int(totals.get(key, 0)) + int(value)
        if self.lease is not None:
            self.lease.check()
        self.store.engine.set_cursor(self.pass_name, self.agent_id, self.state)

    def at_start(self, columns: list[str], where: str | None = None) -> pa.Table | None:
        """On a resumed run, the agent's rows (``columns``) as they were when the run began, so that what the
        run decides from the whole corpus (say, competition between neighbours) is what its first attempt
        decided. None on a run that was not resumed, or when that table version is no longer kept."""
        version = self.started_version
        if not self.state.get("resumed") or version is None:
            return None
        try:
            if not self.agents:
                return self.store.engine.scan(self.agent_id, columns=columns, where=where, version=version)
            return self.store.engine.scan_agents(self.agents, columns=columns, where=where, version=version)
        except Exception:  # cleaned up by maintenance since: decide from the rows as they are now
            return None

    def finish(self, **summary: Any) -> dict[str, Any]:
        """Mark the run done, give the lease back, and return the cursor summary a report carries. A deferred
        run that never began wrote nothing and saves nothing (``idle`` in the summary)."""
        self.state.update(done=True, finished_at=utcnow().isoformat(), **summary)
        if self.pending:
            self._deferred = None
            out = {k: self.state.get(k) for k in ("run_id", "after", "batches", "resumed", "done")}
            return {**out, "idle": True, "lease_waited_s": 0.0}
        self.store.engine.set_cursor(self.pass_name, self.agent_id, self.state)
        out = {k: self.state.get(k) for k in ("run_id", "after", "batches", "resumed", "done")}
        if self.lease is not None:
            self._finalizer.detach()
            self.lease.release()
            out["lease_waited_s"] = round(self.lease.waited_s, 3)
            if self.lease.taken_over is not None:
                out["lease_taken_over"] = self.lease.taken_over
            self.lease = None
        return out

    def unrecorded(self, columns: list[str]) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """On a resumed run, what a killed attempt may have written without recording it: the agent's rows
        after the cursor (``columns``, plus ``id``) as they were when its last recorded batch ended, and as they
        are now. None on a run that was not resumed, or when that table version is no longer kept."""
        version = self.state.get("memories_version")
        if not self.state.get("resumed") or version is None:
            return None
        where = None if self.after is None else f"id > {lit(self.after)}"
        cols = list(dict.fromkeys(["id", *columns]))
        try:
            before = agent_frame(self.store, self.scanned, cols, where, version=int(version))
        except Exception:  # cleaned up by maintenance since: the counts of that attempt are lost
            return None
        return before, agent_frame(self.store, self.scanned, cols, where=where)

    @property
    def counts(self) -> dict[str, int]:
        """Counts accumulated by earlier (killed) attempts of this run, to add to this attempt's."""
        return dict(self.state.get("counts", {}))
