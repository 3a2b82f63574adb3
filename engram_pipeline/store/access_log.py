"""Access bookkeeping through a side log: reads never rewrite ``memories`` rows.

Recall and get count each read (``access_count`` + 1, ``last_accessed_at``). Written straight onto the memory
rows, every flush rewrites the rows it touches into new fragments that the vector index does not cover, so
recall under steady traffic slowed down until maintenance re-indexed (measured in
``bench/bench_recall_latency.py``). Reads are appended to the ``access_log`` table instead (one commit per
append, never touching ``memories``), and folded in by the passes that read access signals, at their start:

1. **claim**: one ``update`` marks the unclaimed entries of the agent with this fold's id. Two folds racing
   over the same entries conflict on that commit; the loser re-runs it and finds them claimed, so no entry
   is applied twice.
2. **apply**: the claimed entries, summed per ``(id, version)``, go through
   :func:`~engram_pipeline.store.edits.record_access`: one commit per distinct count (a handful),
   version-checked (an entry for a version that moved is dropped, exactly as inline bookkeeping racing an
   edit would be) and never bumping ``version``. ``last_accessed_at`` becomes the latest read of the entries
   that share a count, so it is exact to within one fold interval.
3. **delete** the claimed entries.

A fold that dies between claim and delete leaves entries claimed by a dead fold; the next fold deletes those
once they are older than :data:`STALE_CLAIM` without applying them. Access counts are a ranking signal, not a
ledger: they are applied at most once, never twice.

Each append is a fragment and a version of the log, and every read of it (``get``'s overlay, below) visits
the fragments and lists the versions: a server appends once a second, so between two folds (every 5 minutes
when promotion is scheduled, never when it is not) a ``pending`` read grew from 34 ms after 600 appends to
368 ms after 3,000, and an append from 3.6 to 22.5 ms (``bench/bench_side_versions.py``). The appends keep
both bounded as the other side tables' commits do (:class:`~.maintenance.FragmentBound`: compacted past
``SIDE_MAX_FRAGMENTS``, old versions cleaned up every ``CLEAN_EVERY`` appends), where the fold's compaction
keeps a week of versions.

Folded rows move to new fragments too, but once per fold rather than once per second, and when the rows
outside the vector index pass ``ENGRAM_INDEX_REFRESH_ROWS`` the fold re-indexes (:func:`refresh_vector_index`).
Readers that must see reads not yet folded (``get``, health, export) overlay the log with
:func:`overlay_pending`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import polars as pl
import pyarrow as pa

from engram_pipeline.model import ACCESS_LOG_SCHEMA, Memory, rows_to_table, utcnow
from engram_pipeline.store.cas import _with_retry
from engram_pipeline.store.maintenance import FragmentBound, compact_if_fragmented, optimize_table
from engram_pipeline.store.sharding import by_shard
from engram_pipeline.store.sql import eq, in_list, lit

if TYPE_CHECKING:
    from engram_pipeline.store.core import MemoryStore

STALE_CLAIM = timedelta(hours=1)
LOG_COMPACT_FRAGMENTS = 64  # compact the log once it has this many fragments (one per append)
_TS = 'Timestamp(Microsecond, Some("UTC"))'


@dataclass(frozen=True)
class AccessFold:
    entries: int  # log entries claimed and deleted
    rows: int  # distinct (memory, version) pairs they named
    applied: int  # of those, rows still at the version read, whose counts were added
    dropped_stale_claims: int  # entries a dead fold had claimed, deleted unapplied
    reindexed: bool  # whether the fold refreshed the vector index
    by_agent: dict[str, int] = field(default_factory=dict)  # ``entries`` per agent (for a sweep's reports)


class AccessLog:
    """The ``access_log`` table: appends of reads, and the summed view of what is not folded yet."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.bound = FragmentBound(table)  # a fragment and a version per append, bounded between folds

    def log(self, rows: Sequence[Memory], *, times: int | Sequence[int] = 1, at: datetime | None = None) -> None:
        """Count a read of each row (``id``, ``agent_id``, ``version`` as read) in one append to the log.

        ``times`` is one count for every row or one per row (a deferred recorder folds many reads into one
        entry). Nothing in ``memories`` changes until a fold.
        """
        if not rows:
            return
        counts = [int(times)] * len(rows) if isinstance(times, int) else [int(t) for t in times]
        if len(counts) != len(rows) or min(counts) < 1:
            raise ValueError("times must be positive, one count for all rows or one per row")
        when = at or utcnow()
        entries = [
            {"id": r["id"], "agent_id": r["agent_id"], "version": int(r["version"]), "times": n, "at": when}
            for r, n in zip(rows, counts, strict=True)
        ]
        table = rows_to_table(entries, ACCESS_LOG_SCHEMA)
        _with_retry(lambda: self.table.add(table))
        self.bound.wrote()

    def pending(self, agent_id: str | Sequence[str] | None = None, *, ids: Sequence[str] | None = None) -> pl.DataFrame:
        """Reads not yet folded (of one agent, of a sequence of them, or of all), summed per ``(id, version)``:
        columns ``id``, ``version``, ``times``, ``at``."""
        conds = []
        if isinstance(agent_id, str):
            conds.append(eq("agent_id", agent_id))
        elif agent_id is not None:
            if not agent_id:
                return _summed(pl.DataFrame(schema=_LOG_FRAME))
            conds.append(f"agent_id IN {in_list(list(agent_id))}")
        if ids is not None:
            if not ids:
                return _summed(pl.DataFrame(schema=_LOG_FRAME))
            conds.append(f"id IN {in_list(list(ids))}")
        return _summed(self._read(" AND ".join(conds) or None))

    def _read(self, where: str | None, *, with_agent: bool = False) -> pl.DataFrame:
        q = self.table.search()
        if where:
            q = q.where(where)
        columns = [*_LOG_FRAME, "agent_id"] if with_agent else list(_LOG_FRAME)
        df = pl.from_arrow(q.select(columns).limit(None).to_arrow())
        assert isinstance(df, pl.DataFrame)
        return df


def fold_access(
    store: MemoryStore,
    agent_id: str | Sequence[str] | None = None,
    *,
    now: datetime | None = None,
    reindex: bool = True,
) -> AccessFold:
    """Fold the logged reads of ``agent_id`` (one id, a sequence of them for a sweep, default: every agent),
    shard by shard, into ``memories``; see the module.

    ``reindex=False`` leaves the vector index to the caller (maintenance compacts right after).
    """
    now = now or utcnow()
    groups: dict[int, str | list[str] | None]
    if agent_id is None:
        groups = dict.fromkeys(range(store.shard_count))
    elif isinstance(agent_id, str):
        groups = {store.shard_of(agent_id): agent_id}
    else:
        groups = dict(by_shard(agent_id, store.shard_count))
        if not groups:
            return AccessFold(0, 0, 0, 0, False)
    folds = [_fold_shard(store, k, agents, now=now, reindex=reindex) for k, agents in groups.items()]
    if len(folds) == 1:
        return folds[0]
    return AccessFold(
        sum(f.entries for f in folds),
        sum(f.rows for f in folds),
        sum(f.applied for f in folds),
        sum(f.dropped_stale_claims for f in folds),
        any(f.reindexed for f in folds),
        {agent: n for f in folds for agent, n in f.by_agent.items()},
    )


def _fold_shard(
    store: MemoryStore, shard: int, agent_id: str | list[str] | None, *, now: datetime, reindex: bool
) -> AccessFold:
    log = store.shards[shard].access_log
    scope = (
        "true"
        if agent_id is None
        else eq("agent_id", agent_id)
        if isinstance(agent_id, str)
        else f"agent_id IN {in_list(agent_id)}"
    )
    if not log.table.count_rows(None if agent_id is None else scope):  # no commit when idle
        return AccessFold(0, 0, 0, 0, reindex and refresh_vector_index(store, shard=shard))
    stale = (
        f"{scope} AND claimed_by IS NOT NULL AND claimed_at < "
        f"arrow_cast({lit((now - STALE_CLAIM).isoformat())}, '{_TS}')"
    )
    dropped = _with_retry(lambda: log.table.delete(stale)).num_deleted_rows
    fold_id = uuid.uuid4().hex
    claimed = _with_retry(
        lambda: log.table.update(
            where=f"{scope} AND claimed_by IS NULL",
            values_sql={"claimed_by": lit(fold_id), "claimed_at": f"arrow_cast({lit(now.isoformat())}, '{_TS}')"},
        )
    ).rows_updated
    if not claimed:
        return AccessFold(0, 0, 0, dropped, reindex and refresh_vector_index(store, shard=shard))
    mine = eq("claimed_by", fold_id)
    claimed_rows = log._read(mine, with_agent=True)
    by_agent = dict(claimed_rows.group_by("agent_id").len().iter_rows())
    summed = _summed(claimed_rows.drop("agent_id"))
    applied = 0
    for (times,), group in summed.group_by("times"):
        at = cast(datetime, group["at"].max())
        rows = group.select("id", "version").to_dicts()
        applied += store.record_access(rows, times=int(times), at=at, shard=shard)
    _with_retry(lambda: log.table.delete(mine))
    _compact_log(log.table)
    reindexed = reindex and refresh_vector_index(store, shard=shard)
    return AccessFold(claimed, summed.height, applied, dropped, reindexed, by_agent)


_LOG_FRAME: dict[str, pl.DataType] = {
    "id": pl.String(),
    "version": pl.Int64(),
    "times": pl.Int64(),
    "at": pl.Datetime("us", "UTC"),
}


def _summed(log: pl.DataFrame) -> pl.DataFrame:
    return log.group_by("id", "version").agg(pl.col("times").sum(), pl.col("at").max()).sort("id", "version")


def overlay_pending(rows: pa.Table, pending: pl.DataFrame) -> pa.Table:
    """``rows`` (with ``id``, ``version``, ``access_count``, ``last_accessed_at``) as they will read once
    ``pending`` (from :meth:`AccessLog.pending`) is folded: reads of a version that moved meanwhile
    do not count, as the fold will drop them."""
    if pending.is_empty() or rows.num_rows == 0:
        return rows
    df = pl.from_arrow(rows)
    assert isinstance(df, pl.DataFrame)
    pending = pending.rename({"times": "_times", "at": "_at"})
    joined = df.join(pending, on=["id", "version"], how="left", maintain_order="left")
    read = pl.col("_times").is_not_null()
    count = pl.col("access_count").fill_null(0) + pl.col("_times")
    merged = joined.with_columns(
        pl.when(read).then(count).otherwise(pl.col("access_count")).alias("access_count"),
        pl.when(read)
        .then(pl.max_horizontal("last_accessed_at", "_at"))
        .otherwise("last_accessed_at")
        .alias("last_accessed_at"),
    ).drop("_times", "_at")
    return merged.to_arrow().cast(rows.schema)


def refresh_vector_index(store: MemoryStore, *, shard: int | None = None, attempts: int = 6) -> bool:
    """Re-index (``optimize``) the ``memories`` table of ``shard`` (default: each) once more than
    ``ENGRAM_INDEX_REFRESH_ROWS`` of its rows are outside the vector index; whether any was re-indexed."""
    limit = store.settings.index_refresh_rows
    if limit <= 0:
        return False
    refreshed = False
    for k in range(store.shard_count) if shard is None else [shard]:
        memories = store.shards[k].memories
        stats = memories.index_stats("vector_idx")
        if stats is None or int(stats.num_unindexed_rows) < limit:
            continue
        optimize_table(memories, attempts=attempts)
        refreshed = True
    return refreshed


def _compact_log(log: Any) -> None:
    compact_if_fragmented(log, LOG_COMPACT_FRAGMENTS)
