"""Store maintenance: compaction, old-version cleanup and indexes, retried on commit conflicts.

Every LanceDB commit creates a table version (even an update that matched nothing), so one maintenance job
compacts small fragments and drops versions older than ``keep``. ``optimize`` racing a writer raises a
retryable commit conflict: the table is re-read at its latest version and the step retried.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lancedb.index import BTree, IvfHnswSq

from engram_pipeline.store.cas import is_retryable_conflict
from engram_pipeline.store.core import SCALAR_INDEXES

if TYPE_CHECKING:
    from engram_pipeline.store.core import MemoryStore

TABLES = ("memories", "links", "audit", "plans", "cursors", "access_log")
# Every index refresh (maintenance, or a fold past ENGRAM_INDEX_REFRESH_ROWS) adds a segment to the vector
# index; past this many, maintenance rebuilds it as one (about 30 s at 100k rows on 2 cores).
MAX_VECTOR_SEGMENTS = 8


@dataclass(frozen=True)
class MaintenanceReport:
    tables: tuple[str, ...]
    versions_before: dict[str, int]
    versions_after: dict[str, int]
    retries: int
    indexes: tuple[str, ...]
    duration_s: float
    accesses_folded: int = 0  # access-log entries folded into ``memories`` before compaction


def maintain(store: MemoryStore, *, keep: timedelta = timedelta(hours=1), attempts: int = 6) -> MaintenanceReport:
    """Fold the access log, compact every table, clean up versions older than ``keep``, and (re)build the
    scalar indexes (and the vector index, which compaction refreshes over the folded rows)."""
    start = time.perf_counter()
    folded = store.fold_access(reindex=False)
    before: dict[str, int] = {}
    after: dict[str, int] = {}
    retries = 0
    for name in TABLES:
        table = getattr(store, name)
        before[name] = len(table.list_versions())
        retries += optimize_table(table, keep=keep, attempts=attempts)
        after[name] = len(table.list_versions())
    indexes = _ensure_indexes(store)
    if "vector" in indexes:  # compaction keeps fragments of different index segments apart; now it can merge them
        retries += optimize_table(store.memories, keep=keep, attempts=attempts)
    return MaintenanceReport(
        TABLES, before, after, retries, indexes, time.perf_counter() - start, accesses_folded=folded.entries
    )


def optimize_table(table: Any, *, keep: timedelta | None = None, attempts: int = 6) -> int:
    """``table.optimize`` (compaction, index refresh, cleanup of versions older than ``keep``), retried on
    commit conflicts; returns the number of retries."""
    for n in range(attempts):
        try:
            table.optimize(cleanup_older_than=keep)
            return n
        except Exception as exc:
            if not is_retryable_conflict(exc) or n == attempts - 1:
                raise
            table.checkout_latest()
            time.sleep(0.05 * 2**n)
    raise AssertionError("unreachable")


def _ensure_indexes(store: MemoryStore) -> tuple[str, ...]:
    """Scalar indexes on the filter columns; a vector index once the table is big enough to pay for it, rebuilt
    when refreshes have split it into more than :data:`MAX_VECTOR_SEGMENTS` segments."""
    have = {idx.columns[0] for idx in store.memories.list_indices()}
    built: list[str] = []
    if store.memories.count_rows() == 0:
        return ()
    for column in SCALAR_INDEXES:
        if column not in have:
            store.memories.create_index(column, config=BTree())
            built.append(column)
    if "vector" in have:
        stats = store.memories.index_stats("vector_idx")
        if stats is None or stats.num_indices <= MAX_VECTOR_SEGMENTS:
            return tuple(built)
    elif store.memories.count_rows() < store.settings.vector_index_min_rows:
        return tuple(built)
    # The column goes first: with ``config`` LanceDB reads that argument as the column, not the metric.
    store.memories.create_index("vector", config=IvfHnswSq(distance_type="cosine"), replace=True)
    built.append("vector")
    return tuple(built)


def describe(store: MemoryStore) -> dict[str, Any]:
    return {name: {"rows": getattr(store, name).count_rows()} for name in TABLES}
