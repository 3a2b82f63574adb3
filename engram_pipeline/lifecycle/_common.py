"""What every lifecycle pass shares: run ids, reading an agent as a polars frame, and resumable cursors.

A pass reads one agent's rows column-wise, computes its changes with polars/numpy, and writes them through
the store's batched compare-and-set in batches ordered by id. After each batch it advances its cursor
(``cursors`` table, key ``<pass>/<agent>``). A run that was killed leaves an unfinished cursor; the next run
of that pass for that agent resumes after the last committed id **with the same ``now``**, so the end state
equals that of an uninterrupted run, and rows already written are not written again (their version moved,
and a recomputation finds nothing left to change).

One run at a time per (pass, agent): :meth:`PassCursor.start` first takes a :class:`Lease` (a compare-and-set
row in the ``cursors`` table). A second run waits for it (up to :data:`LEASE_WAIT`, then :class:`PassBusy`),
so two runs started together never both do the work; the report's ``cursor`` says how long it waited. The
holder renews the lease from a daemon thread; a lease whose holder is gone (its process died on this host, or it
expired after :data:`LEASE_TTL` without renewal) is taken over, and the cursor says so (``lease_taken_over``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import polars as pl

from engram_pipeline.model import Memory, utcnow
from engram_pipeline.store.sql import lit

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore


LEASE_TTL = timedelta(minutes=10)  # a holder that has not renewed for this long is presumed dead
LEASE_WAIT = timedelta(minutes=15)  # how long a second run of a pass waits for the first before PassBusy
_POLL_S = (0.05, 1.0)  # first and longest pause between two looks at a held lease


class PassBusy(RuntimeError):
    """Another run of this pass holds the agent's lease and did not finish within the wait."""

    def __init__(self, pass_name: str, agent_id: str, holder: dict[str, Any], waited_s: float) -> None:
        self.pass_name, self.agent_id, self.holder = pass_name, agent_id, holder
        super().__init__(
            f"pass {pass_name!r} for agent {agent_id!r} is running elsewhere (pid {holder.get('pid')} on "
            f"{holder.get('host')}, lease until {holder.get('expires_at')}); waited {waited_s:.0f} s. "
            "Retry later; a dead holder's lease is taken over once it expires."
        )


class LeaseLost(RuntimeError):
    """The lease expired and another run took it over: this run stops rather than do the work twice."""


@dataclass
class Lease:
    """One holder of the (pass, agent) lease; see the module docstring. A daemon thread renews it every quarter
    :data:`LEASE_TTL` while it is held, so a long batch keeps it and a killed process lets it expire."""

    store: MemoryStore
    key: str
    holder: str  # this holder's JSON text, as stored
    ttl: timedelta
    waited_s: float = 0.0
    taken_over: dict[str, Any] | None = None
    lost: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False, compare=False)

    @classmethod
    def acquire(
        cls,
        store: MemoryStore,
        key: str,
        *,
        ttl: timedelta | None = None,
        wait: timedelta | None = None,
        owner: Any = None,
    ) -> Lease:
        """Take the lease, waiting for a live holder. ``owner`` is the frame of the pass that takes it: the
        heartbeat renews the lease only while that frame is still running in this thread, so a pass that
        raised gives it back within a quarter TTL even when something keeps its traceback alive."""
        ttl, wait = ttl or LEASE_TTL, wait or LEASE_WAIT
        start = time.monotonic()
        pause = _POLL_S[0]
        token = uuid.uuid4().hex
        while True:
            current = store.lease_holder(key)
            other = json.loads(current) if current else None
            if other is None or _holder_gone(other):
                mine = _holder_json(token, ttl)
                if store.swap_lease(key, current, mine):
                    lease = cls(store, key, mine, ttl, time.monotonic() - start, other)
                    running = _running_check(owner)
                    threading.Thread(target=lease._beat, args=(running,), name=f"lease {key}", daemon=True).start()
                    return lease
                continue  # someone else swapped first: look again
            waited = time.monotonic() - start
            if waited >= wait.total_seconds():
                name, _, agent = key.partition("/")
                raise PassBusy(name, agent, other, waited)
            time.sleep(pause)
            pause = min(pause * 2, _POLL_S[1])

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease expired and another run took it over."""
        if self.lost:
            raise LeaseLost(f"lease {self.key!r} was taken over after it expired; this run stops here")

    def release(self) -> None:
        self._stop.set()
        with self._lock:
            self.store.swap_lease(self.key, self.holder, None)

    def _beat(self, running: Callable[[], bool]) -> None:
        while not self._stop.wait(self.ttl.total_seconds() / 4):
            if not running():  # the pass returned or raised without finishing: give the lease back
                self.lost = True
                with contextlib.suppress(Exception):
                    self.release()
                return
            with self._lock:
                if self._stop.is_set():
                    return
                fresh = json.loads(self.holder) | {"expires_at": (utcnow() + self.ttl).isoformat()}
                text = json.dumps(fresh, sort_keys=True)
                try:
                    renewed = self.store.swap_lease(self.key, self.holder, text)
                except Exception:  # the store is unreachable for now: try again at the next beat
                    continue
                if not renewed:
                    self.lost = True
                    return
                self.holder = text


def _running_check(owner: Any) -> Callable[[], bool]:
    """A test of whether frame ``owner`` is still on the stack of the thread calling this (always true
    without a frame). Only its id and code are kept: a reference to it would keep the pass's locals alive."""
    if owner is None:
        return lambda: True
    thread, frame_id, code = threading.get_ident(), id(owner), owner.f_code

    def running() -> bool:
        frame = sys._current_frames().get(thread)
        while frame is not None:
            if id(frame) == frame_id and frame.f_code is code:
                return True
            frame = frame.f_back
        return False

    return running


def _holder_json(token: str, ttl: timedelta) -> str:
    pid = os.getpid()
    holder = {
        "token": token,
        "host": socket.gethostname(),
        "pid": pid,
        "pid_started": _process_started(pid),
        "thread": threading.get_ident(),
        "expires_at": (utcnow() + ttl).isoformat(),
    }
    return json.dumps(holder, sort_keys=True)


def _holder_gone(holder: dict[str, Any]) -> bool:
    """Whether a lease holder is certainly no longer running: expired, or a dead process or thread here."""
    if datetime.fromisoformat(holder["expires_at"]) <= utcnow():
        return True
    if holder.get("host") != socket.gethostname():
        return False
    pid = int(holder["pid"])
    if pid == os.getpid():
        # This process: the holder was an attempt in this thread that raised (a thread runs one pass of a
        # kind at a time), or a thread that has ended.
        thread = holder.get("thread")
        return thread == threading.get_ident() or thread not in {t.ident for t in threading.enumerate()}
    started = _process_started(pid)
    return started is None or started != holder.get("pid_started")


def _process_started(pid: int) -> str | None:
    """The start time of a live (non-zombie) process, or None; tells a reused pid from the holder's."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        try:  # no procfs: whether the pid exists at all
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "unknown"
    state, started = fields[0], fields[19]
    return None if state in ("Z", "X") else started


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
        id), or begin a new one. Raises :class:`PassBusy` when another run holds the lease past :data:`LEASE_WAIT`.

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
            "memories_version": store.memories.version,
        }
        cursor = cls._held(store, pass_name, agent_id, state, lease)
        store.set_cursor(pass_name, agent_id, state)
        return cursor

    @classmethod
    def _held(
        cls, store: MemoryStore, pass_name: str, agent_id: str, state: dict[str, Any], lease: Lease
    ) -> PassCursor:
        cursor = cls(store, pass_name, agent_id, state, lease)
        # A run that raised gives the lease back once its cursor is garbage (or the process exits); a killed
        # process leaves it to be taken over (dead pid here, or expiry).
        cursor._finalizer = weakref.finalize(cursor, _release_quietly, store, lease)
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
        self.state["memories_version"] = self.store.memories.version
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


def _release_quietly(store: MemoryStore, lease: Lease) -> None:
    with contextlib.suppress(Exception):  # at garbage collection or exit: else the lease expires on its own
        lease.release()


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
