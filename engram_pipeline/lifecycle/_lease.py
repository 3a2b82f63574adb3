"""The (pass, agent) lease that lets one run of a pass at a time work on an agent; see
:mod:`engram_pipeline.lifecycle._common`, whose :class:`PassCursor` takes it.

The lease is a row of the ``cursors`` table (key ``lease:<pass>/<agent>``) holding its holder as JSON (host,
pid and its start time, thread, expiry); it changes hands only by compare-and-set on that text. A daemon thread
renews it every quarter :data:`LEASE_TTL` while the pass that took it is still running.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from engram_pipeline.model import utcnow

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
    abandoned: bool = False  # its cursor was garbage-collected unfinished: the heartbeat gives it back
    _done: bool = field(default=False, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    _wake: threading.Event = field(default_factory=threading.Event, init=False, repr=False, compare=False)

    @classmethod
    def acquire(
        cls,
        store: MemoryStore,
        key: str,
        *,
        ttl: timedelta | None = None,
        wait: timedelta | None = None,
        owner: Any = None,
        running: Callable[[], bool] | None = None,
    ) -> Lease:
        """Take the lease, waiting for a live holder. ``owner`` is the frame of the pass that takes it: the
        heartbeat renews the lease only while that frame is still running in this thread, so a pass that
        raised gives it back within a quarter TTL even when something keeps its traceback alive. ``running``
        is that test made beforehand (:func:`_running_check`), for a lease taken deeper in the pass's stack."""
        ttl, wait = ttl or LEASE_TTL, wait or LEASE_WAIT
        start = time.monotonic()
        pause = _POLL_S[0]
        token = uuid.uuid4().hex
        while True:
            current = store.engine.lease_holder(key)
            other = json.loads(current) if current else None
            if other is None or _holder_gone(other):
                mine = _holder_json(token, ttl)
                if store.engine.swap_lease(key, current, mine):
                    lease = cls(store, key, mine, ttl, time.monotonic() - start, other)
                    alive = running or _running_check(owner)
                    threading.Thread(target=lease._beat, args=(alive,), name=f"lease {key}", daemon=True).start()
                    return lease
                time.sleep(random.uniform(0, _POLL_S[0]))  # a rival swapped too: part, then look again
                continue
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
        """Give the lease back now (the run finished)."""
        self._done = True
        self._wake.set()
        with self._lock:
            self.store.engine.swap_lease(self.key, self.holder, None)

    def abandon(self) -> None:
        """Have the heartbeat give the lease back. Safe in a finalizer: no I/O and no lock here, since garbage
        collection may run it in any thread, the heartbeat's own included."""
        self.abandoned = True
        self._wake.set()

    def _beat(self, running: Callable[[], bool]) -> None:
        period = self.ttl.total_seconds() / 4
        while True:
            self._wake.wait(period)
            if self._done:
                return
            if self.abandoned or not running():  # the pass ended without finishing: give the lease back
                self.lost = True
                with contextlib.suppress(Exception):
                    self.release()
                return
            with self._lock:
                if self._done:
                    return
                fresh = json.loads(self.holder) | {"expires_at": (utcnow() + self.ttl).isoformat()}
                text = json.dumps(fresh, sort_keys=True)
                try:
                    renewed = self.store.engine.swap_lease(self.key, self.holder, text)
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
