"""What every lifecycle pass shares: run ids, reading an agent as a polars frame, and resumable cursors.

A pass reads one agent's rows column-wise, computes its changes with polars/numpy, and writes them through
the store's batched compare-and-set in batches ordered by id. After each batch it advances its cursor
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
"""

from __future__ import annotations

import sys
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from engram_pipeline.lifecycle._lease import Lease, LeaseLost, PassBusy
from engram_pipeline.model import Memory, utcnow
from engram_pipeline.store.sql import lit

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

__all__ = ["Lease", "LeaseLost", "PassBusy", "PassCursor", "agent_frame", "delete_rechecked", "new_run_id"]


def new_run_id(pass_name: str) -> str:
    return f"{pass_name}-{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def agent_frame(
    store: MemoryStore, agent_id: str, columns: list[str] | None = None, where: str | None = None
) -> pl.DataFrame:
    """One agent's rows (optionally only ``columns``) as a polars frame, sorted by id."""
    table = store.scan(agent_id, columns=columns, where=where)
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df.sort("id") if "id" in df.columns else df


@dataclass
class PassCursor:
    """Resumable progress of one pass over one agent."""

    store: MemoryStore
    pass_name: str
    agent_id: str
    state: dict[str, Any] = field(default_factory=dict)
    lease: Lease | None = None
    _finalizer: Any = field(default=None, init=False, repr=False, compare=False)

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
    ) -> PassCursor:
        """Take the (pass, agent) lease, then resume an unfinished run of this pass (keeping its ``now`` and run
        id), or begin a new one. Raises :class:`PassBusy` when another run holds the lease past ``LEASE_WAIT``.

        ``scope`` says what the run works on (say ``{"plan_id": ...}``); it is saved before the run's first
        commit, and an unfinished run of another scope is closed as ``abandoned_for`` instead of resumed.
        Call it from the pass function itself: the lease is held while that function runs (see :class:`Lease`).
        """
        lease = Lease.acquire(store, f"{pass_name}/{agent_id}", owner=sys._getframe(1))
        try:
            saved = store.get_cursor(pass_name, agent_id)
            if saved and not saved.get("done") and scope is not None and saved.get("scope") != scope:
                store.set_cursor(pass_name, agent_id, {**saved, "done": True, "abandoned_for": scope})
                saved = None
        except BaseException:
            lease.release()
            raise
        if saved and not saved.get("done"):
            saved["resumed"] = int(saved.get("resumed", 0)) + 1
            return cls._held(store, pass_name, agent_id, saved, lease)
        state = {
            "scope": scope,
            "run_id": run_id or new_run_id(pass_name),
            "now": (now or utcnow()).isoformat(),
            "after": None,
            "done": False,
            "batches": 0,
            "resumed": 0,
            "memories_version": store.memories_version(),
        }
        cursor = cls._held(store, pass_name, agent_id, state, lease)
        store.set_cursor(pass_name, agent_id, state)
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
    def after(self) -> str | None:
        return self.state.get("after")

    def batches(self, ids: list[str], size: int) -> Iterator[list[str]]:
        """The sorted ``ids`` not yet done, in batches of ``size``."""
        todo = sorted(i for i in ids if self.after is None or i > self.after)
        for start in range(0, len(todo), size):
            yield todo[start : start + size]

    def advance(self, last_id: str, **counts: int) -> None:
        """Record that every id up to ``last_id`` is done (call after the batch's commit)."""
        self.state["after"] = last_id
        self.state["batches"] = int(self.state.get("batches", 0)) + 1
        self.state["memories_version"] = self.store.memories_version()
        totals = self.state.setdefault("counts", {})
        for key, value in counts.items():
            totals[key] = int(totals.get(key, 0)) + int(value)
        if self.lease is not None:
            self.lease.check()
        self.store.set_cursor(self.pass_name, self.agent_id, self.state)

    def finish(self, **summary: Any) -> dict[str, Any]:
        """Mark the run done, give the lease back, and return the cursor summary a report carries."""
        self.state.update(done=True, finished_at=utcnow().isoformat(), **summary)
        self.store.set_cursor(self.pass_name, self.agent_id, self.state)
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
            then = self.store.scan(self.agent_id, columns=cols, where=where, version=int(version))
        except Exception:  # cleaned up by maintenance since: the counts of that attempt are lost
            return None
        before = pl.from_arrow(then)
        now = agent_frame(self.store, self.agent_id, cols, where=where)
        assert isinstance(before, pl.DataFrame)
        return before, now

    @property
    def counts(self) -> dict[str, int]:
        """Counts accumulated by earlier (killed) attempts of this run, to add to this attempt's."""
        return dict(self.state.get("counts", {}))


def delete_rechecked(
    store: MemoryStore,
    expected: dict[str, int],
    *,
    recheck: Callable[[list[Memory]], dict[str, int]],
    actor: str,
    action: str,
    run_id: str | None = None,
) -> tuple[list[str], list[str]]:
    """Delete rows still at their ``expected`` versions (audited pre-images, one commit), re-reading the
    misses once: ``recheck(fresh_rows)`` returns ``{id: version}`` of those that should still go.

    Returns ``(deleted ids, skipped ids)``; skipped are rows that moved again, or vanished, in between.
    A re-read row that ``recheck`` leaves out no longer qualifies and is neither.
    """
    if not expected:
        return [], []
    first = store.cas_delete(expected, actor=actor, action=action, run_id=run_id)
    deleted = list(first.applied)
    misses = list(first.skipped_concurrent_edit)
    if not misses:
        return deleted, []
    fresh = store.get_many(misses)
    gone = sorted(set(misses) - {r["id"] for r in fresh})
    again = store.cas_delete(recheck(fresh), actor=actor, action=action, run_id=run_id)
    return deleted + list(again.applied), gone + list(again.skipped_concurrent_edit)
