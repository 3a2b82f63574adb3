"""Importance decay: re-score every memory of an agent, mark the faded ones stale, prune the forgotten.

One pass over one agent, or over a set of agents of one shard at once (:func:`decay_sweep`, what
:func:`engram_pipeline.lifecycle.sweep.sweep` runs), column-wise:

1. read the columns the score needs (never the vectors) of every agent as one polars frame, sorted by id;
2. score every row with :func:`engram_pipeline.scoring.importance_frame` at the run's ``now``;
3. decide per row: ``stale`` when score <= ``MEMORY_DECAY_STALE_SCORE_THRESHOLD``, back to ``active`` when a
   stale row scores above it again (only rows that are ``active`` or ``stale`` are re-statused: contradicted,
   superseded and archived rows keep their status, and ``superseded_by`` is never touched, so a hidden row
   stays hidden); prune when score < ``MEMORY_DECAY_PRUNE_SCORE_THRESHOLD``, the row was created more than
   ``MEMORY_DECAY_PRUNE_OLDER_THAN_DAYS`` ago, it is not pinned, and the retention policy lets it go: under
   the default ``signal`` policy and ``safe``, only a row whose content a merge canonical or a newer value holds
   (:mod:`engram_pipeline.lifecycle.retention`); under ``seed`` any such row;
4. write, per batch of ``MEMORY_DECAY_BATCH_SIZE`` ids, only the rows where something changed, through the
   store's batched compare-and-set (one commit per batch), then prune with audited pre-images (actor
   ``ltm_decay``, action ``prune``; :meth:`MemoryStore.restore` brings a row back).

A row edited between the read and the write is re-read and re-scored once (an edit may have pinned it); a row
edited again in between is skipped and counted in ``skipped_concurrent_edit``. The pass keeps a
:class:`PassCursor` (one per agent, or one per shard for a sweep of several agents, see
:func:`~engram_pipeline.lifecycle._common.sweep_key`): a killed run resumes after its last committed batch
with the same ``now``. Running it twice at the same ``now`` writes nothing the second time (no new table
version of ``memories`` either). The decision is per row, so a sweep's batches span agents and every agent's
rows are decided exactly as its own run would decide them; each agent's report is its share of the counts.

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> _ = store.remember("alice", "We decided to ship on Friday")
>>> decay_importance(store, "alice").processed
1
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import polars as pl

from engram_pipeline.lifecycle._batched import BatchResult, Recount, Written, count_frames, run_batched, write_decided
from engram_pipeline.lifecycle._common import PassCursor, agent_frame, sweep_key
from engram_pipeline.lifecycle.retention import Holders, holders
from engram_pipeline.model import Memory, polars_schema
from engram_pipeline.scoring import importance_frame
from engram_pipeline.settings import Settings

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

PASS_NAME = "ltm_decay"
ACTOR = "ltm_decay"
# What the score reads, plus what the decision compares against; never the vector.
COLUMNS = [
    "id",
    "agent_id",
    "version",
    "content",
    "tags",
    "pinned",
    "access_count",
    "created_at",
    "last_accessed_at",
    "importance",
    "importance_factors",
    "status",
]
# Not ``decayed_at``: that is confidence decay's reference time (the time its continuous form charges from);
# stamping it here would make the confidence pass of the same run find no time elapsed. When importance was
# last scored is in ``importance_factors`` (``scored_at``).
WRITTEN = ["id", "version", "importance", "importance_factors", "status"]
RESTATUSED = ("active", "stale")
COUNTS = ("processed", "updated", "stale", "pruned", "skipped_concurrent_edit")


@dataclass(frozen=True)
class DecayReport:
    processed: int
    updated: int
    stale: int  # rows this run marked stale (active -> stale)
    pruned: int
    skipped_concurrent_edit: int
    cursor: dict[str, Any]
    accesses_folded: int = 0  # access-log entries folded into the rows before scoring them


def decide(df: pl.DataFrame, *, now: datetime, settings: Settings, held: Holders) -> pl.DataFrame:
    """Score ``df`` (the :data:`COLUMNS`) and decide each row: ``action`` is ``prune``, ``update`` or null.

    ``held`` says which rows the retention policy lets go (:func:`~engram_pipeline.lifecycle.retention.holders`).

    Returns ``id``, ``agent_id``, ``version``, ``action``, the new ``importance``, ``importance_factors`` and
    ``status``, and ``became_stale``.
    """
    scored = importance_frame(df, now=now, half_life_days=settings.importance_half_life_days)
    score = pl.col("importance")
    old_status = pl.col("status")
    status = (
        pl.when(~old_status.is_in(RESTATUSED))
        .then(old_status)
        .when(score <= settings.stale_threshold)
        .then(pl.lit("stale"))
        .otherwise(pl.lit("active"))
    )
    cutoff = now - timedelta(days=settings.prune_older_than_days)
    prune = (
        (score < settings.prune_threshold)
        & (pl.col("created_at") < pl.lit(cutoff))
        & ~pl.col("pinned").fill_null(False)
        & held.prunable_expr()
    )
    changed = (
        score.ne_missing(pl.col("old_importance"))
        | pl.col("importance_factors").ne_missing(pl.col("old_factors"))
        | status.ne_missing(old_status)
    )
    out = pl.concat(
        [
            df.select(
                "id",
                "agent_id",
                "version",
                "status",
                "created_at",
                "pinned",
                pl.col("importance").alias("old_importance"),
                pl.col("importance_factors").alias("old_factors"),
            ),
            scored,
        ],
        how="horizontal",
    )
    return out.select(
        "id",
        "agent_id",
        "version",
        pl.when(prune).then(pl.lit("prune")).when(changed).then(pl.lit("update")).alias("action"),
        "importance",
        "importance_factors",
        status.alias("new_status"),
        ((status == "stale") & (old_status != "stale")).alias("became_stale"),
    ).rename({"new_status": "status"})


def decay_importance(
    store: MemoryStore,
    agent_id: str,
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    batch_size: int | None = None,
) -> DecayReport:
    """Re-score, re-status and prune one agent's memories; see the module docstring. The sweep of one agent."""
    return decay_sweep(store, [agent_id], now=now, run_id=run_id, batch_size=batch_size)[agent_id]


def decay_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    batch_size: int | None = None,
) -> dict[str, DecayReport]:
    """:func:`decay_importance` over every agent of ``agent_ids`` (all of one shard) in one columnar run: one
    read, one decision, batched compare-and-set commits spanning agents, one cursor. Returns each agent's report
    (the run's cursor summary in each)."""
    agents = sorted(set(agent_ids))
    if not agents:
        return {}
    settings = store.settings
    key, scope = sweep_key(agents, settings.shards)
    folded = store.engine.fold_access(agents)  # importance reads the access signals: fold the logged reads in first
    cursor = PassCursor.deferred(store, PASS_NAME, key, now=now, run_id=run_id, scope=scope, agents=agents)
    now, run_id = cursor.now, cursor.run_id
    held = holders(store, agents)
    redecide = partial(_redecide, now=now, settings=settings, held=held)
    commit = partial(_commit, store, run_id=run_id)
    run = run_batched(
        cursor,
        lambda: decide(agent_frame(store, agents, COLUMNS), now=now, settings=settings, held=held),
        lambda batch: write_decided(store, batch, commit, redecide),
        size=batch_size or settings.decay_batch_size,
        counts=COUNTS,
        recount=Recount(
            ["agent_id", "status", "importance_factors"], partial(_unrecorded_counts, store, now=now, run_id=run_id)
        ),
    )
    return {
        agent: DecayReport(
            **run.agent_counts(agent, COUNTS), cursor=run.cursor, accesses_folded=folded.by_agent.get(agent, 0)
        )
        for agent in agents
    }


def _commit(store: MemoryStore, decided: pl.DataFrame, *, run_id: str) -> Written:
    """Prune (audited) and re-score the decided rows at the versions read: two compare-and-set commits."""
    prunes = decided.filter(pl.col("action") == "prune")
    gone = store.engine.cas_delete(
        dict(zip(prunes["id"].to_list(), prunes["version"].to_list(), strict=True)),
        actor=ACTOR,
        action="prune",
        run_id=run_id,
    )
    updates = decided.filter(pl.col("action") == "update")
    written = store.engine.cas_write(updates.select(WRITTEN).to_dicts(), actor=ACTOR, action="decay", run_id=run_id)
    applied = set(written.applied)
    stale = [i for i in updates.filter(pl.col("became_stale"))["id"].to_list() if i in applied]
    return Written(
        {"updated": written.applied, "stale": stale, "pruned": gone.applied},
        missed=[*gone.skipped_concurrent_edit, *written.skipped_concurrent_edit],
    )


def _redecide(fresh: list[Memory], *, now: datetime, settings: Settings, held: Holders) -> pl.DataFrame:
    """Re-score rows re-read after a missed compare-and-set (an edit may have pinned them)."""
    return decide(_frame(fresh), now=now, settings=settings, held=held)


def _unrecorded_counts(
    store: MemoryStore, before: pl.DataFrame, after: pl.DataFrame, *, now: datetime, run_id: str
) -> BatchResult:
    """What killed attempts of this run did after its last recorded batch (see ``PassCursor.unrecorded``):
    rows they pruned (gone, with this run's prune event) and rows they re-scored (their ``importance_factors``
    were scored at the run's ``now``), so that the resumed run reports the whole run."""
    gone = sorted(set(before["id"].to_list()) - set(after["id"].to_list()))
    audited = store.engine.audited(gone, action="prune", run_id=run_id) if gone else set()
    pruned = before.filter(pl.col("id").is_in(list(audited)))
    scored_at = pl.col("importance_factors").str.json_path_match("$.scored_at")
    was = before.select("id", pl.col("status").alias("was"), scored_at.alias("was_at"))
    at = now.isoformat()
    written = after.with_columns(scored_at.alias("at")).join(was, on="id")
    written = written.filter((pl.col("at") == at) & pl.col("was_at").ne_missing(at))
    stale = written.filter((pl.col("status") == "stale") & (pl.col("was") != "stale"))
    return count_frames({"processed": pruned, "pruned": pruned, "updated": written, "stale": stale})


def _frame(rows: list[Memory]) -> pl.DataFrame:
    """Fresh rows (dicts, as the store returns them) as a frame of :data:`COLUMNS` with the table's types."""
    schema = polars_schema(COLUMNS)
    return pl.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema, orient="row")
