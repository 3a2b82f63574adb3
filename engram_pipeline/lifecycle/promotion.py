"""STM to LTM promotion, and the sweep of expired short-term memories.

One pass over one agent's short-term rows, or over those of a set of agents of one shard at once
(:func:`promotion_sweep`, what :func:`engram_pipeline.lifecycle.sweep.sweep` runs), decided column-wise at the
run's ``now``:

* **promote**: a visible STM row accessed at least ``STM_CONSOLIDATION_ACCESS_THRESHOLD`` times whose
  importance (re-scored with :func:`engram_pipeline.scoring.importance_frame`) is at least
  ``STM_CONSOLIDATION_IMPORTANCE_THRESHOLD`` moves to LTM keeping its id (``tier="ltm"``, no TTL, the new score
  written). With ``ENGRAM_LTM_QUOTA`` > 0 only as many as the agent's LTM has room for are promoted, best
  score first (ties: lowest id); the others stay STM and count as ``skipped``;
* **collapse**: an eligible row whose vector is within ``MEMORY_DUPLICATE_THRESHOLD`` of a visible LTM row of
  the agent is not promoted but superseded by that row (``superseded_by``, reason in metadata, a
  ``duplicate-of`` link, an audited pre-image so ``restore`` brings it back); it counts as ``skipped``;
* **expire**: an STM row past ``expires_at`` that is not promoted and not pinned is removed with an audited
  pre-image (actor ``stm_expiry``, action ``prune``): never silently.

Writes go through the store's batched compare-and-set (a row edited meanwhile is re-read and re-decided once;
one that moved again is counted in ``skipped_concurrent_edit``); a row found already promoted when re-read
counts as ``skipped``. The pass keeps a :class:`PassCursor` and is idempotent: a second run writes nothing. A
killed run resumes with the same ``now`` and reports the whole run: it counts what its killed attempt promoted,
collapsed or expired after the last recorded batch, and writes the ``duplicate-of`` link of a collapse whose
attempt died before its links commit.

In a sweep the rules that are per agent stay per agent: the LTM quota is each agent's (ranked within the
agent), and an LTM duplicate is searched among the agent's own rows (exact cosine, one matrix product per agent
with eligible rows, from one read of the vectors). Everything else is one frame, and the batches span agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from engram_pipeline.lifecycle._batched import BatchResult, Recount, Written, count_frames, run_batched, write_decided
from engram_pipeline.lifecycle._common import PassCursor, agent_frame, sweep_key
from engram_pipeline.model import Memory, dumps_metadata, loads_metadata, polars_schema
from engram_pipeline.scoring import importance_frame
from engram_pipeline.settings import Settings
from engram_pipeline.visibility import VISIBLE_SQL, visible_expr

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

PASS_NAME = "stm_promotion"
COUNTS = ("processed", "promoted", "skipped", "expired", "skipped_concurrent_edit")
COLLAPSE_REASON = "stm_promotion_duplicate"
ACTOR = "stm_promotion"
EXPIRY_ACTOR = "stm_expiry"
COLUMNS = [
    "id", "agent_id", "version", "tier", "content", "tags", "pinned", "access_count", "created_at", "last_accessed_at",
    "expires_at", "status", "superseded_by", "metadata", "importance_factors",
]  # fmt: skip
VISIBLE_LTM = f"tier = 'ltm' AND {VISIBLE_SQL}"
WRITES = ("promote", "collapse", "expire", "relink")  # the actions that commit ("quota" only counts)
DUPLICATE_CHUNK = 200  # agents whose vectors the duplicate search holds in memory at once


@dataclass(frozen=True)
class PromotionReport:
    processed: int
    promoted: int
    skipped: int  # already promoted, collapsed into an LTM duplicate, or over the LTM quota
    expired: int
    skipped_concurrent_edit: int
    cursor: dict[str, Any]
    accesses_folded: int = 0  # access-log entries folded into the rows before reading them


def eligible(df: pl.DataFrame, *, now: datetime, settings: Settings) -> pl.DataFrame:
    """Score STM rows (the :data:`COLUMNS`) and flag the visible ones that earned promotion."""
    scored = importance_frame(df, now=now, half_life_days=settings.importance_half_life_days)
    visible = (pl.col("tier") == "stm") & visible_expr()
    ok = (pl.col("access_count").fill_null(0) >= settings.stm_access_threshold) & (
        pl.col("importance") >= settings.stm_importance_threshold
    )
    expired = pl.col("expires_at").is_not_null() & (pl.col("expires_at") < pl.lit(now))
    # the old factors only carry the information score over (importance_frame); the new ones replace them
    return pl.concat([df.drop("importance_factors", strict=False), scored], how="horizontal").with_columns(
        (visible & ok).alias("eligible"), (expired & ~pl.col("pinned").fill_null(False)).alias("expired")
    )


def promote_stm(
    store: MemoryStore,
    agent_id: str,
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    batch_size: int | None = None,
) -> PromotionReport:
    """Promote what earned durability, collapse what LTM already holds, sweep what expired. The sweep of one
    agent."""
    return promotion_sweep(store, [agent_id], now=now, run_id=run_id, batch_size=batch_size)[agent_id]


def promotion_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    batch_size: int | None = None,
) -> dict[str, PromotionReport]:
    """:func:`promote_stm` over every agent of ``agent_ids`` (all of one shard) in one columnar run: one read,
    one decision, batched compare-and-set commits spanning agents, one cursor. Returns each agent's report."""
    agents = sorted(set(agent_ids))
    if not agents:
        return {}
    settings = store.settings
    key, scope = sweep_key(agents, settings.shards)
    folded = store.engine.fold_access(agents)  # access counts decide promotion: fold the logged reads in first
    cursor = PassCursor.deferred(store, PASS_NAME, key, now=now, run_id=run_id, scope=scope, agents=agents)
    now, run_id = cursor.now, cursor.run_id
    # A resumed run looks for LTM duplicates among the rows that were LTM when the run began, as its first
    # attempt did: a row that attempt promoted is no duplicate to collapse into.
    started = cursor.at_start(["id"], "tier = 'stm'")
    commit = partial(_commit, store, now=now, run_id=run_id)
    redecide = partial(_redecide, now=now, settings=settings)
    run = run_batched(
        cursor,
        lambda: _plan(
            store,
            eligible(agent_frame(store, agents, COLUMNS, where="tier = 'stm'"), now=now, settings=settings),
            now=now,
            not_ltm=[] if started is None else started["id"].to_pylist(),
            resumed=bool(cursor.state.get("resumed")),
        ),
        lambda batch: write_decided(store, batch, commit, lambda fresh: redecide(fresh, batch)),
        size=batch_size or settings.decay_batch_size,
        counts=COUNTS,
        recount=Recount(
            ["agent_id", "tier", "superseded_by", "metadata"],
            partial(_unrecorded_counts, store, now=now, run_id=run_id),
        ),
        writes=pl.col("action").is_in(WRITES),
    )
    return {
        agent: PromotionReport(
            **run.agent_counts(agent, COUNTS), cursor=run.cursor, accesses_folded=folded.by_agent.get(agent, 0)
        )
        for agent in agents
    }


def _plan(store: MemoryStore, df: pl.DataFrame, *, now: datetime, not_ltm: list[str], resumed: bool) -> pl.DataFrame:
    """Add ``action`` (promote / collapse / quota / expire / relink / null) and the LTM duplicate of each row;
    ``planned`` is the action as first decided (a re-read row keeps it, see :func:`_redecide`).

    ``relink``: on a ``resumed`` run, a row this run already collapsed (a killed attempt of it) gets its
    ``duplicate-of`` link again if that attempt died before writing it (a run that was not resumed has no such
    row to look for: a second run at the same ``now`` stays idle). ``not_ltm``: rows never to take as an LTM
    duplicate."""
    settings = store.settings
    dup_id, dup_score = _ltm_duplicates(store, df.filter(pl.col("eligible")).select("id", "agent_id"), not_ltm)
    df = df.with_columns(
        pl.col("id").replace_strict(dup_id, default=None, return_dtype=pl.String).alias("duplicate_of"),
        pl.col("id").replace_strict(dup_score, default=None, return_dtype=pl.Float64).alias("duplicate_score"),
    )
    wanted = df.filter(pl.col("eligible") & pl.col("duplicate_of").is_null())
    ranked = wanted.sort(["importance", "id"], descending=[True, False])
    if settings.ltm_quota > 0 and not ranked.is_empty():  # each agent's quota, best score first within the agent
        ltm = agent_frame(store, ranked["agent_id"].unique().to_list(), ["agent_id"], where=VISIBLE_LTM)
        used = ltm.group_by("agent_id").agg(pl.len().alias("used"))
        room = (settings.ltm_quota - pl.col("used").fill_null(0)).clip(lower_bound=0)
        ranked = (
            ranked.join(used, on="agent_id", how="left")
            .sort(["importance", "id"], descending=[True, False])
            .filter(pl.int_range(pl.len()).over("agent_id") < room)
        )
    chosen = pl.col("id").is_in(ranked["id"].to_list())
    action = (
        pl.when(chosen)
        .then(pl.lit("promote"))
        .when(pl.col("expired"))
        .then(pl.lit("expire"))
        .when(pl.col("eligible") & pl.col("duplicate_of").is_not_null())
        .then(pl.lit("collapse"))
        .when(pl.col("eligible"))
        .then(pl.lit("quota"))
        .when(_collapsed_at(now) & pl.lit(resumed))
        .then(pl.lit("relink"))
    )
    return df.with_columns(action.alias("action"), action.alias("planned")).sort("id")


def _collapsed_at(now: datetime) -> pl.Expr:
    """Rows collapsed into an LTM duplicate by the run at ``now``."""
    note = pl.col("metadata").str.json_path_match
    return (
        pl.col("superseded_by").is_not_null()
        & (note("$.superseded.reason") == COLLAPSE_REASON)
        & (note("$.superseded.at") == now.isoformat())
    )


def _ltm_duplicates(
    store: MemoryStore, candidates: pl.DataFrame, not_ltm: list[str]
) -> tuple[dict[str, str], dict[str, float]]:
    """For each row of ``candidates`` (``id``, ``agent_id``), its nearest visible LTM row of its own agent by
    cosine, when at or above the duplicate threshold (ties: the lowest id). Exact and vectorised: the vectors of
    the candidates and of their agents' visible LTM rows are read together (one read per
    :data:`DUPLICATE_CHUNK` agents), and each agent's candidates are scored against its LTM rows in one matrix
    product, so a sweep costs no query per agent or row."""
    if candidates.is_empty():
        return {}, {}
    wanted = candidates["id"]
    agents = sorted(set(candidates["agent_id"].to_list()))
    where = f"vector IS NOT NULL AND (tier = 'stm' OR {VISIBLE_LTM})"
    dim = store.embedder.dimension
    threshold = store.settings.duplicate_threshold
    dup_id: dict[str, str] = {}
    dup_score: dict[str, float] = {}
    for start in range(0, len(agents), DUPLICATE_CHUNK):
        read = agent_frame(store, agents[start : start + DUPLICATE_CHUNK], ["id", "agent_id", "tier", "vector"], where)
        # rows this very run promoted are no LTM duplicate (filtered here: the list can be long for a filter)
        read = read.filter((pl.col("tier") == "stm") | ~pl.col("id").is_in(not_ltm))
        read = read.with_columns(pl.col("id").is_in(wanted).alias("query"), (pl.col("tier") == "ltm").alias("target"))
        for (_,), rows in read.filter(pl.col("query") | pl.col("target")).group_by("agent_id", maintain_order=True):
            queries, targets = rows.filter(pl.col("query")), rows.filter(pl.col("target"))
            if queries.is_empty() or targets.is_empty():
                continue
            q, t = _unit(queries["vector"], dim), _unit(targets["vector"], dim)
            scores = q @ t.T
            best = scores.argmax(axis=1)  # the first maximum: targets are sorted by id
            top = scores[np.arange(len(best)), best]
            target_ids = targets["id"].to_list()
            for src, j, score in zip(queries["id"].to_list(), best.tolist(), top.tolist(), strict=True):
                # Rounded: a matrix product's last bits depend on the shape of the block (a resumed run's has
                # fewer rows), and the score is stored (metadata, link); the decision must not move with them.
                score = round(min(1.0, float(score)), 6)
                if score >= threshold:
                    dup_id[src], dup_score[src] = target_ids[j], score
    return dup_id, dup_score


def _unit(vectors: pl.Series, dim: int) -> np.ndarray:
    """A vector column as unit rows (float64; a zero vector stays zero and matches nothing)."""
    m = vectors.to_numpy().reshape(-1, dim).astype(np.float64) if vectors.len() else np.zeros((0, dim))
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


def _commit(store: MemoryStore, decided: pl.DataFrame, *, now: datetime, run_id: str) -> Written:
    """Write one decided batch at the versions read: promotions, collapses (audited, then their links), expiries
    (audited deletes). Quota rows, and rows a re-read found already promoted or no longer eligible, are
    ``skipped``; so is a collapsed row (it is not promoted)."""
    action = pl.col("action")
    promote = decided.filter(action == "promote")
    promoted = store.engine.cas_write(
        promote.select("id", "version", "importance", "importance_factors")
        .with_columns(tier=pl.lit("ltm"), expires_at=pl.lit(None))
        .to_dicts(),
        actor=ACTOR,
        action="promote",
        run_id=run_id,
    )
    collapse = decided.filter(action == "collapse")
    collapsed = store.engine.cas_write(
        [_collapse(r, now) for r in collapse.iter_rows(named=True)],
        actor=ACTOR,
        action="supersede",
        run_id=run_id,
        audit=True,
    )
    relinked = set(collapsed.applied) | set(decided.filter(action == "relink")["id"].to_list())
    store.engine.add_links(
        [
            {"agent_id": r["agent_id"], "src_id": r["id"], "dst_id": r["duplicate_of"] or r["superseded_by"],
             "rel": "duplicate-of", "score": r["duplicate_score"] or _collapse_score(r)}
            for r in decided.filter(pl.col("id").is_in(list(relinked))).iter_rows(named=True)
        ],
        run_id=run_id,
        keyed=True,
    )  # fmt: skip
    expire = decided.filter(action == "expire")
    expired = store.engine.cas_delete(
        dict(zip(expire["id"].to_list(), expire["version"].to_list(), strict=True)),
        actor=EXPIRY_ACTOR,
        action="prune",
        run_id=run_id,
    )
    settled = decided.filter(
        (action == "quota") | (action.is_null() & pl.col("planned").is_in(["promote", "collapse"]))
    )
    return Written(
        {"promoted": promoted.applied, "expired": expired.applied,
         "skipped": [*settled["id"].to_list(), *collapsed.applied]},
        missed=[*promoted.skipped_concurrent_edit, *collapsed.skipped_concurrent_edit,
                *expired.skipped_concurrent_edit],
    )  # fmt: skip


def _redecide(fresh: list[Memory], batch: pl.DataFrame, *, now: datetime, settings: Settings) -> pl.DataFrame:
    """Re-read rows decided again, each for what was planned for it: a promotion or collapse still happens if
    the row is still eligible, an expiry if it is still expired, STM and unpinned; otherwise nothing."""
    planned = batch.select("id", "planned", "duplicate_of", "duplicate_score")
    again = eligible(_frame(fresh), now=now, settings=settings).join(planned, on="id")
    keep = (
        pl.when(pl.col("planned").is_in(["promote", "collapse"]) & pl.col("eligible"))
        .then(pl.col("planned"))
        .when((pl.col("planned") == "expire") & pl.col("expired") & (pl.col("tier") == "stm"))
        .then(pl.col("planned"))
    )
    return again.with_columns(keep.alias("action"))


def _collapse(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The change hiding ``row`` behind its LTM duplicate (superseded, with the reason in its metadata)."""
    meta = loads_metadata(row)
    meta["superseded"] = {
        "reason": COLLAPSE_REASON,
        "by": row["duplicate_of"],
        "score": row["duplicate_score"],
        "at": now.isoformat(),
    }
    return {
        "id": row["id"],
        "version": row["version"],
        "status": "superseded",
        "superseded_by": row["duplicate_of"],
        "metadata": dumps_metadata(meta),
    }


def _collapse_score(row: dict[str, Any]) -> float | None:
    score = loads_metadata(row).get("superseded", {}).get("score")
    return None if score is None else float(score)


def _unrecorded_counts(
    store: MemoryStore, before: pl.DataFrame, after: pl.DataFrame, *, now: datetime, run_id: str
) -> BatchResult:
    """What killed attempts of this run did after its last recorded batch (see ``PassCursor.unrecorded``): STM
    rows they promoted (LTM now) or expired (gone, with this run's prune event) left the STM rows this run
    reads, and rows they collapsed count as skipped, so that the resumed run reports the whole run."""
    stm = before.filter(pl.col("tier") == "stm")
    gone = sorted(set(stm["id"].to_list()) - set(after["id"].to_list()))
    audited = store.engine.audited(gone, action="prune", run_id=run_id) if gone else set()
    expired = stm.filter(pl.col("id").is_in(list(audited)))
    tier_now = after.select("id", pl.col("tier").alias("tier_now"))
    promoted = stm.join(tier_now, on="id").filter(pl.col("tier_now") == "ltm").drop("tier_now")
    was_visible = stm.filter(pl.col("superseded_by").is_null())["id"].to_list()
    collapsed = after.filter(pl.col("id").is_in(was_visible) & _collapsed_at(now))
    processed = pl.concat([expired, promoted])
    return count_frames({"processed": processed, "expired": expired, "promoted": promoted, "skipped": collapsed})


def _frame(rows: list[Memory]) -> pl.DataFrame:
    """Re-read rows (dicts) as a frame of :data:`COLUMNS` with the table's types."""
    return pl.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], schema=polars_schema(COLUMNS), orient="row")
