"""Store maintenance: compaction, old-version cleanup and indexes, yielding to writers.

Every LanceDB commit creates a table version (even an update that matched nothing), so one maintenance job
compacts small fragments and drops versions older than ``keep``. Compaction is a ``Rewrite`` transaction, and
any writer's commit on a fragment it rewrites preempts it ("Retryable commit conflict ... This Rewrite
transaction was preempted by concurrent transaction Update"). Maintenance gives way: it re-reads the table at
its latest version, waits for a quiet moment (no new version for a while) with a jittered, growing pause and
tries again, for up to :data:`CONFLICT_BUDGET_S` per step. A step still preempted then is skipped, named in
the report's ``skipped``, and left for the next run: maintenance never fails a run because writers were busy.
(lancedb 0.40 offers compaction only as one whole-table ``optimize`` without ``pylance``, so there is no
smaller unit to fall back to.)
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from lancedb.index import BTree, IvfHnswSq

from engram_pipeline.store import versions
from engram_pipeline.store.retry import is_retryable_conflict

if TYPE_CHECKING:
    from engram_pipeline.settings import Settings

log = logging.getLogger(__name__)

# The tables of a shard, by base name (a store of N > 1 shards names them per shard: store/shards.py).
SIDE_MAX_FRAGMENTS = 32  # compact a side table (cursors, audit, links, plans) past this many fragments
SIDE_CHECK_EVERY = 16  # commits to a side table between two reads of its fragment count
TABLES = ("memories", "links", "audit", "plans", "cursors", "access_log")
# BTree indexes on the columns every filter starts with.
SCALAR_INDEXES = ("agent_id", "id", "content_hash")
# Every index refresh (maintenance, or a fold past ENGRAM_INDEX_REFRESH_ROWS) adds a segment to the vector
# index; past this many, maintenance rebuilds it as one (about 30 s at 100k rows on 2 cores).
MAX_VECTOR_SEGMENTS = 8
CONFLICT_BUDGET_S = 60.0  # how long one step keeps giving way to writers before it is skipped for this run
QUIET_S = 0.25  # a table with no new version for this long is quiet enough to try again
_PAUSE_S = (0.05, 2.0)  # first and longest pause after a conflict


def optimize_table(table: Any, *, keep: timedelta | None = None, attempts: int = 6) -> int:
    """``table.optimize`` (compaction, index refresh, cleanup of versions older than ``keep``), giving way to
    writers; returns the number of retries. Preempted ``attempts`` times, it gives up for now (logged)."""
    retries, why = try_optimize(table, keep=keep, attempts=attempts)
    if why:
        log.warning("optimize of %s left for later: %s", getattr(table, "name", table), why)
    return retries


def compact_if_fragmented(table: Any, limit: int, *, attempts: int = 6) -> bool:
    """Compact ``table`` once it has ``limit`` fragments or more; True if it did (or tried)."""
    if int(table.stats()["fragment_stats"]["num_fragments"]) < limit:
        return False
    optimize_table(table, attempts=attempts)
    return True


class FragmentBound:
    """Keeps a side table's fragments bounded between maintenance runs.

    Every commit to a side table (a cursor step, a lease swap, a batch of audit events or links, a plan) adds a
    fragment or a deletion file, and every read of it (a cursor look-up by key) visits each one: a sweep that
    ran agent by agent through 200 agents left 4,820 fragments in ``cursors`` and each pass slowed as it read
    them. The table's collaborator calls :meth:`wrote` after each commit; every :data:`SIDE_CHECK_EVERY`
    commits it reads the fragment count and, past :data:`SIDE_MAX_FRAGMENTS`, compacts in line (a side table is
    small; a compaction preempted by a writer is left for the next check, never retried at length).

    Every commit also adds a version, and a compaction here keeps a week of them (lancedb's default): every
    :data:`~.versions.CLEAN_EVERY` commits the old versions are cleaned up as ``memories``' are
    (:func:`~.versions.clean_old_versions`), since each read of the table lists them.
    """

    def __init__(self, table: Any) -> None:
        self.table = table
        self.writes = 0

    def wrote(self) -> None:
        self.writes += 1
        if self.writes % SIDE_CHECK_EVERY == 0:
            compact_if_fragmented(self.table, SIDE_MAX_FRAGMENTS, attempts=1)
        if self.writes % versions.CLEAN_EVERY == 0:
            versions.clean_old_versions(self.table)


def try_optimize(table: Any, *, keep: timedelta | None, attempts: int) -> tuple[int, str | None]:
    return yielding(table, lambda: table.optimize(cleanup_older_than=keep), attempts=attempts)


def yielding(
    table: Any, step: Callable[[], Any], *, attempts: int, budget_s: float | None = None
) -> tuple[int, str | None]:
    """Run a maintenance ``step`` on ``table``, retrying commit conflicts after a quiet moment, within
    ``budget_s`` (default :data:`CONFLICT_BUDGET_S`). Returns (retries, None) or (retries, why it gave up).
    Errors other than commit conflicts propagate."""
    deadline = time.monotonic() + (CONFLICT_BUDGET_S if budget_s is None else budget_s)
    pause = _PAUSE_S[0]
    for n in range(attempts):
        try:
            step()
            return n, None
        except Exception as exc:
            if not is_retryable_conflict(exc):
                raise
            last = str(exc).split(", /", 1)[0]  # the message without lance's source location
        if n == attempts - 1 or time.monotonic() >= deadline:
            return n, f"preempted by concurrent writers {n + 1} times ({last})"
        table.checkout_latest()
        _wait_quiet(table, min(pause * random.uniform(0.5, 1.5), max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, _PAUSE_S[1])
    raise AssertionError("unreachable")


def _wait_quiet(table: Any, longest: float) -> None:
    """Sleep until ``table`` has had no new version for :data:`QUIET_S` (writers paused), at most ``longest``."""
    end = time.monotonic() + longest
    seen, since = table.version, time.monotonic()
    while time.monotonic() < end:
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))
        now = table.version
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= QUIET_S:
            return


def ensure_indexes(
    table: Any, name: str, settings: Settings, *, attempts: int
) -> tuple[tuple[str, ...], int, list[tuple[str, str]]]:
    """Scalar indexes on the filter columns of a ``memories`` table (``name``); a vector index once the table
    is big enough to pay for it, rebuilt when refreshes have split it into more than
    :data:`MAX_VECTOR_SEGMENTS` segments. Returns the indexes built, the retries, and the builds left for
    the next run (preempted by writers)."""
    have = {idx.columns[0] for idx in table.list_indices()}
    built: list[str] = []
    retries = 0
    skipped: list[tuple[str, str]] = []

    def build(column: str, make: Callable[[], Any]) -> None:
        nonlocal retries
        n, why = yielding(table, make, attempts=attempts)
        retries += n
        if why:
            skipped.append((name, f"{column} index: {why}"))
        else:
            built.append(column)

    if table.count_rows() == 0:
        return (), 0, []
    for column in SCALAR_INDEXES:
        if column not in have:
            build(column, partial(table.create_index, column, config=BTree()))
    if "vector" in have:
        stats = table.index_stats("vector_idx")
        if stats is None or stats.num_indices <= MAX_VECTOR_SEGMENTS:
            return tuple(built), retries, skipped
    elif table.count_rows() < settings.vector_index_min_rows:
        return tuple(built), retries, skipped
    build("vector", partial(build_vector_index, table))
    return tuple(built), retries, skipped


def build_vector_index(table: Any) -> None:
    """(Re)build the vector index of ``memories`` as one segment."""
    # The column goes first: with ``config`` LanceDB reads that argument as the column, not the metric.
    table.create_index("vector", config=IvfHnswSq(distance_type="cosine"), replace=True)
