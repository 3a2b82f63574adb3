"""Deferred access logging for the API process.

Recall and get count each read. Logged inline that is one append to the ``access_log`` table per request (see
``engram_pipeline.store.access_log``): a commit per read, and a fragment per commit. The recorder instead
collects ``(agent, id, version) -> count`` in memory and appends it every ``interval_s`` (1 s in the server)
in one commit. Nothing here touches ``memories``: the passes fold the log into the rows, version-checked and
without bumping ``version``. An append that fails is logged and dropped; access counts are a ranking signal,
not a ledger.

``interval_s=0`` logs synchronously (used by tests that read counts right after a request).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from engram_pipeline.model import Memory, utcnow

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

log = logging.getLogger(__name__)


class AccessRecorder:
    def __init__(self, store: MemoryStore, *, interval_s: float = 1.0) -> None:
        self.store = store
        self.interval_s = interval_s
        self._pending: Counter[tuple[str, str, int]] = Counter()
        self._last_at: datetime | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.flushes = 0
        self.commits = 0

    def start(self) -> None:
        if self.interval_s <= 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="engram-access-recorder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the flusher and flush what is pending (at shutdown nothing recorded is lost)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.flush()

    def record(self, rows: Iterable[Memory]) -> None:
        keys = [(str(r["agent_id"]), str(r["id"]), int(r["version"])) for r in rows]
        if not keys:
            return
        if self._thread is None:  # not started (or synchronous mode): log inline
            self.store.engine.log_access([_entry(k) for k in keys])
            self.commits += 1
            return
        with self._lock:
            self._pending.update(keys)
            self._last_at = utcnow()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, Counter()
            at = self._last_at
        if not pending:
            return
        try:
            self.store.engine.log_access([_entry(k) for k in pending], times=list(pending.values()), at=at)
            self.commits += 1
        except Exception:  # a ranking signal: never let bookkeeping take the server down
            log.exception("access log append failed for %d rows", len(pending))
        self.flushes += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()


def _entry(key: tuple[str, str, int]) -> Memory:
    agent_id, memory_id, version = key
    return {"agent_id": agent_id, "id": memory_id, "version": version}
