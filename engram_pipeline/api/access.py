"""Deferred access bookkeeping for the API process.

Recall and get record each access (``access_count`` + 1, ``last_accessed_at``). Done inline that is one
LanceDB ``update`` commit per request: it adds latency to every recall and a table version per read. The
recorder instead collects ``(id, version) -> count`` in memory and flushes every ``interval_s`` (1 s in the
server) in one commit
per distinct count (almost always one), through :meth:`MemoryStore.record_access`: still version-checked
(a row edited since it was read is left alone, exactly as inline bookkeeping would leave it) and never
bumping ``version``. A flush that fails is logged and dropped, like an inline update racing an edit; access
counts are a ranking signal, not a ledger.

Every commit also leaves a small fragment that recall scans outside the vector index until maintenance
compacts it; at 100k rows, 50 ms flushes under steady recall load fragmented the table noticeably more than
1 s flushes (``bench/bench_recall_latency.py``).

``interval_s=0`` records synchronously (used by tests that read counts right after a request).
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
CHUNK = 500


class AccessRecorder:
    def __init__(self, store: MemoryStore, *, interval_s: float = 1.0) -> None:
        self.store = store
        self.interval_s = interval_s
        self._pending: Counter[tuple[str, int]] = Counter()
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
        keys = [(str(r["id"]), int(r["version"])) for r in rows]
        if not keys:
            return
        if self._thread is None:  # not started (or synchronous mode): record inline
            self.store.record_access([{"id": i, "version": v} for i, v in keys])
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
        by_times: dict[int, list[Memory]] = {}
        for (memory_id, version), n in pending.items():
            by_times.setdefault(n, []).append({"id": memory_id, "version": version})
        for times, rows in sorted(by_times.items()):
            try:
                for start in range(0, len(rows), CHUNK):  # bound the size of one filter expression
                    self.store.record_access(rows[start : start + CHUNK], times=times, at=at)
                    self.commits += 1
            except Exception:  # a ranking signal: never let bookkeeping take the server down
                log.exception("access bookkeeping flush failed for %d rows", len(rows))
        self.flushes += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()
