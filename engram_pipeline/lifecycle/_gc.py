"""Fewer garbage collections while a sweep or a bulk import runs.

A shard's sweep allocates millions of small objects that live for the whole run (per-text caches, frames'
Python values, the plans it decides), and CPython's default first-generation threshold (700 allocations)
then runs a collection every few hundred microseconds, each walking young objects that are all still alive
(about a fifth of a sweep's time; a checked import, :func:`engram_pipeline.importer.import_jsonl`, is the same
case: the figures are in ``docs/scale.md``). Neither makes reference cycles it relies on the collector to
free, and the threshold is raised only while one runs: :func:`fewer_collections` is re-entrant and thread-safe
(the first caller in raises it, the last one out restores what was there).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SWEEP_GC_THRESHOLD = 50_000  # first-generation allocations between collections while a sweep or an import runs

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] = gc.get_threshold()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's first-generation threshold to :data:`SWEEP_GC_THRESHOLD` for the block."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            if _saved[0] and _saved[0] < SWEEP_GC_THRESHOLD:  # 0: collection is off; leave a caller's choice
                gc.set_threshold(SWEEP_GC_THRESHOLD, *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
