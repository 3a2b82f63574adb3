"""Access bookkeeping through a side log: reads never rewrite ``memories`` rows.

Recall and get count each read (``access_count`` + 1, ``last_accessed_at``). Written straight onto the memory
rows, every flush rewrites the rows it touches into new fragments that the vector index does not cover, so
recall under steady traffic slowed down until maintenance re-indexed (measured in
``bench/bench_recall_latency.py``). Reads are appended to the ``access_log`` table instead (one commit per
append, never touching ``memories``), and folded in by the passes that read access signals, at their start
(:mod:`.access_fold`).

Each append is a fragment and a version of the log, and every read of it (``get``'s overlay, below) visits
the fragments and lists the versions: a server appends once a second, so between two folds (every 5 minutes
when promotion is scheduled, never when it is not) both a ``pending`` read and an append grew with the
appends (``bench/bench_side_versions.py``; figures in ``docs/scale.md``). The appends keep
both bounded as the other side tables' commits do (:class:`~.maintenance.FragmentBound`: compacted past
``SIDE_MAX_FRAGMENTS``, old versions cleaned up every ``CLEAN_EVERY`` appends), where the fold's compaction
keeps a week of versions.

Readers that must see reads not yet folded (``get``, health, export) overlay the log with
:func:`overlay_pending`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl
import pyarrow as pa

from engram_pipeline.model import ACCESS_LOG_SCHEMA, Memory, rows_to_table, utcnow
from engram_pipeline.store import one_trip
from engram_pipeline.store.maintenance import FragmentBound
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.sql import eq, where_in


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
        with_retry(lambda: self.table.add(table))
        self.bound.wrote()

    def pending(self, agent_id: str | Sequence[str] | None = None, *, ids: Sequence[str] | None = None) -> pl.DataFrame:
        """Reads not yet folded (of one agent, of a sequence of them, or of all), summed per ``(id, version)``:
        columns ``id``, ``version``, ``times``, ``at``."""
        agents: list[str | None] = [None]
        if isinstance(agent_id, str):
            agents = [eq("agent_id", agent_id)]
        elif agent_id is not None:
            agents = list(where_in("agent_id", list(agent_id)))
        rows: list[str | None] = [None] if ids is None else list(where_in("id", list(ids)))
        if not agents or not rows:
            return summed_reads(pl.DataFrame(schema=_LOG_FRAME))
        # a long list of agents or ids is read in chunks (store/sql.py); a read is in at most one of them
        parts = [self.entries(" AND ".join(c for c in (a, r) if c is not None) or None) for a in agents for r in rows]
        return summed_reads(parts[0] if len(parts) == 1 else pl.concat(parts))

    def entries(self, where: str | None, *, with_agent: bool = False) -> pl.DataFrame:
        columns = [*_LOG_FRAME, "agent_id"] if with_agent else list(_LOG_FRAME)
        df = pl.from_arrow(one_trip.read(self.table, where or None, columns=columns))
        assert isinstance(df, pl.DataFrame)
        return df


_LOG_FRAME: dict[str, pl.DataType] = {
    "id": pl.String(),
    "version": pl.Int64(),
    "times": pl.Int64(),
    "at": pl.Datetime("us", "UTC"),
}


def summed_reads(log: pl.DataFrame) -> pl.DataFrame:
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
