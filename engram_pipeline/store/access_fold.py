"""Folding the access log (:mod:`.access_log`) into ``memories``, by the passes that read access signals, at their
start:

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

Folded rows move to new fragments too, but once per fold rather than once per second, and when the rows
outside the vector index pass ``ENGRAM_INDEX_REFRESH_ROWS`` the fold re-indexes (:func:`refresh_vector_index`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from engram_pipeline.model import utcnow
from engram_pipeline.store.access_log import AccessFold, summed_reads
from engram_pipeline.store.maintenance import compact_if_fragmented, optimize_table
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.sharding import by_shard
from engram_pipeline.store.sql import eq, in_list, lit

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine

STALE_CLAIM = timedelta(hours=1)
LOG_COMPACT_FRAGMENTS = 64  # compact the log once it has this many fragments (one per append)
_TS = 'Timestamp(Microsecond, Some("UTC"))'


def fold_access(
    store: Engine,
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
    store: Engine, shard: int, agent_id: str | list[str] | None, *, now: datetime, reindex: bool
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
    dropped = with_retry(lambda: log.table.delete(stale)).num_deleted_rows
    fold_id = uuid.uuid4().hex
    claimed = with_retry(
        lambda: log.table.update(
            where=f"{scope} AND claimed_by IS NULL",
            values_sql={"claimed_by": lit(fold_id), "claimed_at": f"arrow_cast({lit(now.isoformat())}, '{_TS}')"},
        )
    ).rows_updated
    if not claimed:
        return AccessFold(0, 0, 0, dropped, reindex and refresh_vector_index(store, shard=shard))
    mine = eq("claimed_by", fold_id)
    claimed_rows = log.entries(mine, with_agent=True)
    by_agent = dict(claimed_rows.group_by("agent_id").len().iter_rows())
    summed = summed_reads(claimed_rows.drop("agent_id"))
    applied = 0
    for (times,), group in summed.group_by("times"):
        at = cast(datetime, group["at"].max())
        rows = group.select("id", "version").to_dicts()
        applied += store.record_access(rows, times=int(times), at=at, shard=shard)
    with_retry(lambda: log.table.delete(mine))
    _compact_log(log.table)
    reindexed = reindex and refresh_vector_index(store, shard=shard)
    return AccessFold(claimed, summed.height, applied, dropped, reindexed, by_agent)


def refresh_vector_index(store: Engine, *, shard: int | None = None, attempts: int = 6) -> bool:
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
