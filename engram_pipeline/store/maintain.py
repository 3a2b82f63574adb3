"""The maintenance job over a whole store: fold the access log, then compact, clean up and index every table
of every shard, each step giving way to writers (:mod:`.maintenance`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from engram_pipeline.store.maintenance import ensure_indexes, try_optimize

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine


@dataclass(frozen=True)
class MaintenanceReport:
    tables: tuple[str, ...]
    versions_before: dict[str, int]
    versions_after: dict[str, int]
    retries: int
    indexes: tuple[str, ...]
    duration_s: float
    accesses_folded: int = 0  # access-log entries folded into ``memories`` before compaction
    skipped: tuple[tuple[str, str], ...] = ()  # (table, what was left for the next run and why)


def maintain(store: Engine, *, keep: timedelta = timedelta(hours=1), attempts: int = 1000) -> MaintenanceReport:
    """Fold the access log, compact every table, clean up versions older than ``keep``, and (re)build the
    scalar indexes (and the vector index, which compaction refreshes over the folded rows).

    Never raises because of concurrent writers: a step they keep preempting (see the module docstring) is
    listed in ``skipped``. ``attempts`` caps the tries of one step (the time budget usually ends it first).
    """
    start = time.perf_counter()
    folded = store.fold_access(reindex=False)
    before: dict[str, int] = {}
    after: dict[str, int] = {}
    retries = 0
    skipped: list[tuple[str, str]] = []
    tables = store.tables()
    for name, table in tables.items():
        before[name] = len(table.list_versions())
        n, why = try_optimize(table, keep=keep, attempts=attempts)
        retries += n
        if why:
            skipped.append((name, f"compaction and cleanup: {why}"))
        after[name] = len(table.list_versions())
    indexes: list[str] = []
    for shard in store.shards:  # each shard's memories table has its own indexes
        memories, name = shard.memories, shard.name("memories")
        built, index_retries, index_skipped = ensure_indexes(memories, name, store.settings, attempts=attempts)
        indexes += [c for c in built if c not in indexes]
        retries += index_retries
        skipped += index_skipped
        if "vector" in built:  # compaction keeps fragments of different index segments apart; now they can merge
            n, why = try_optimize(memories, keep=keep, attempts=attempts)
            retries += n
            if why:
                skipped.append((name, f"compaction after the vector index rebuild: {why}"))
    return MaintenanceReport(
        tuple(tables),
        before,
        after,
        retries,
        tuple(indexes),
        time.perf_counter() - start,
        accesses_folded=folded.entries,
        skipped=tuple(skipped),
    )
