"""STM to LTM promotion, and the sweep of expired short-term memories.

One pass over one agent's short-term rows, decided column-wise at the run's ``now``:

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
counts as ``skipped``. The pass keeps a :class:`PassCursor` and is idempotent: a second run writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from engram_pipeline.lifecycle._common import PassCursor, agent_frame, delete_rechecked
from engram_pipeline.model import Memory, dumps_metadata, loads_metadata, polars_schema
from engram_pipeline.scoring import importance_frame
from engram_pipeline.settings import Settings

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

PASS_NAME = "stm_promotion"
ACTOR = "stm_promotion"
EXPIRY_ACTOR = "stm_expiry"
COLUMNS = [
    "id", "version", "tier", "content", "tags", "pinned", "access_count", "created_at", "last_accessed_at",
    "expires_at", "status", "superseded_by", "metadata",
]  # fmt: skip
VISIBLE_LTM = "tier = 'ltm' AND status NOT IN ('superseded', 'archived') AND superseded_by IS NULL"


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
    visible = (pl.col("tier") == "stm") & ~pl.col("status").is_in(["superseded", "archived"])
    visible = visible & pl.col("superseded_by").is_null()
    ok = (pl.col("access_count").fill_null(0) >= settings.stm_access_threshold) & (
        pl.col("importance") >= settings.stm_importance_threshold
    )
    expired = pl.col("expires_at").is_not_null() & (pl.col("expires_at") < pl.lit(now))
    return pl.concat([df, scored], how="horizontal").with_columns(
        (visible & ok).alias("eligible"), (expired & ~pl.col("pinned").fill_null(False)).alias("expired")
    )


def promote_stm(
    store: MemoryStore, agent_id: str, *, now: datetime | None = None, run_id: str | None = None
) -> PromotionReport:
    """Promote what earned durability, collapse what LTM already holds, sweep what expired."""
    settings = store.settings
    folded = store.fold_access(agent_id)  # access counts decide promotion: fold the logged reads in first
    cursor = PassCursor.start(store, PASS_NAME, agent_id, now=now, run_id=run_id)
    now = cursor.now
    stm = agent_frame(store, agent_id, COLUMNS, where="tier = 'stm'")
    plan = _plan(store, agent_id, eligible(stm, now=now, settings=settings))
    if cursor.after is not None:
        plan = plan.filter(pl.col("id") > cursor.after)
    totals = {"processed": 0, "promoted": 0, "skipped": 0, "expired": 0, "skipped_concurrent_edit": 0}
    for key, value in cursor.counts.items():
        totals[key] = totals.get(key, 0) + value
    for start in range(0, plan.height, settings.decay_batch_size):
        batch = plan.slice(start, settings.decay_batch_size)
        counts = _apply_batch(store, agent_id, batch, now=now, settings=settings, run_id=cursor.run_id)
        counts["processed"] = batch.height
        cursor.advance(str(batch["id"][-1]), **counts)
        for key, value in counts.items():
            totals[key] += value
    summary = cursor.finish(**{f"total_{k}": v for k, v in totals.items()})
    return PromotionReport(**totals, cursor=summary, accesses_folded=folded.entries)


def _plan(store: MemoryStore, agent_id: str, df: pl.DataFrame) -> pl.DataFrame:
    """Add ``action`` (promote / collapse / quota / expire / null) and the LTM duplicate of each row."""
    settings = store.settings
    dup_id, dup_score = _ltm_duplicates(store, agent_id, df.filter(pl.col("eligible"))["id"].to_list())
    df = df.with_columns(
        pl.col("id").replace_strict(dup_id, default=None, return_dtype=pl.String).alias("duplicate_of"),
        pl.col("id").replace_strict(dup_score, default=None, return_dtype=pl.Float64).alias("duplicate_score"),
    )
    wanted = df.filter(pl.col("eligible") & pl.col("duplicate_of").is_null())
    ranked = wanted.sort(["importance", "id"], descending=[True, False])["id"].to_list()
    if settings.ltm_quota > 0:
        used = store.count(agent_id, where=VISIBLE_LTM)
        ranked = ranked[: max(0, settings.ltm_quota - used)]
    chosen = pl.col("id").is_in(ranked)
    action = (
        pl.when(chosen)
        .then(pl.lit("promote"))
        .when(pl.col("expired"))
        .then(pl.lit("expire"))
        .when(pl.col("eligible") & pl.col("duplicate_of").is_not_null())
        .then(pl.lit("collapse"))
        .when(pl.col("eligible"))
        .then(pl.lit("quota"))
    )
    return df.with_columns(action.alias("action")).sort("id")


def _ltm_duplicates(store: MemoryStore, agent_id: str, ids: list[str]) -> tuple[dict[str, str], dict[str, float]]:
    """For each row in ``ids``, its nearest visible LTM row of the agent when at or above the duplicate
    threshold: one multi-vector query for all of them, not one per row."""
    if not ids:
        return {}, {}
    rows = [r for r in store.get_many(ids, columns=["id", "vector"]) if r["vector"] is not None]
    if not rows:
        return {}, {}
    hits = store.nearest(agent_id, [r["vector"] for r in rows], where=VISIBLE_LTM, k=1)
    dup_id: dict[str, str] = {}
    dup_score: dict[str, float] = {}
    for hit in hits:
        score = 1.0 - float(hit["_distance"])
        if score >= store.settings.duplicate_threshold:
            src = rows[int(hit["query_index"])]["id"]
            dup_id[src], dup_score[src] = hit["id"], score
    return dup_id, dup_score


def _apply_batch(
    store: MemoryStore, agent_id: str, batch: pl.DataFrame, *, now: datetime, settings: Settings, run_id: str
) -> dict[str, int]:
    counts = {"promoted": 0, "skipped": 0, "expired": 0, "skipped_concurrent_edit": 0}
    counts["skipped"] = batch.filter(pl.col("action") == "quota").height

    def redecide(fresh: list[Memory]) -> pl.DataFrame:
        return eligible(_frame(fresh), now=now, settings=settings)

    # Promote: a re-read row still STM and still eligible is promoted at its new version; one found already
    # promoted (or no longer eligible) is left alone and counted as skipped.
    promote = batch.filter(pl.col("action") == "promote")
    cols = ["id", "version", "importance", "importance_factors"]

    def as_promotion(df: pl.DataFrame) -> list[dict[str, Any]]:
        return df.select(cols).with_columns(tier=pl.lit("ltm"), expires_at=pl.lit(None)).to_dicts()

    def recompute_promotion(fresh: list[Memory]) -> list[dict[str, Any]]:
        return as_promotion(redecide(fresh).filter(pl.col("eligible")))

    result = store.cas_write(
        as_promotion(promote), recompute=recompute_promotion, actor=ACTOR, action="promote", run_id=run_id
    )
    counts["promoted"] = len(result.applied)
    counts["skipped"] += len(result.unchanged)
    counts["skipped_concurrent_edit"] += len(result.skipped_concurrent_edit)

    # Collapse into the LTM duplicate: superseded (hidden, audited, restorable), linked duplicate-of.
    collapse = {r["id"]: r for r in batch.filter(pl.col("action") == "collapse").iter_rows(named=True)}

    def as_collapse(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for r in rows:
            dup = collapse[r["id"]]
            meta = loads_metadata(r)
            meta["superseded"] = {
                "reason": "stm_promotion_duplicate",
                "by": dup["duplicate_of"],
                "score": dup["duplicate_score"],
                "at": now.isoformat(),
            }
            out.append(
                {"id": r["id"], "version": r["version"], "status": "superseded",
                 "superseded_by": dup["duplicate_of"], "metadata": dumps_metadata(meta)}
            )  # fmt: skip
        return out

    def recompute_collapse(fresh: list[Memory]) -> list[dict[str, Any]]:
        again = redecide(fresh).filter(pl.col("eligible"))
        return as_collapse(again.select("id", "version", "metadata").to_dicts())

    result = store.cas_write(
        as_collapse(list(collapse.values())),
        recompute=recompute_collapse,
        actor=ACTOR,
        action="supersede",
        run_id=run_id,
        audit=True,
    )
    store.add_links(
        [
            {"agent_id": agent_id, "src_id": i, "dst_id": collapse[i]["duplicate_of"],
             "rel": "duplicate-of", "score": collapse[i]["duplicate_score"]}
            for i in result.applied
        ],
        run_id=run_id,
    )  # fmt: skip
    counts["skipped"] += len(collapse) - len(result.skipped_concurrent_edit)
    counts["skipped_concurrent_edit"] += len(result.skipped_concurrent_edit)

    # Expire: audited delete; a re-read row still expired, STM and unpinned goes at its new version.
    expire = batch.filter(pl.col("action") == "expire")

    def recheck(fresh: list[Memory]) -> dict[str, int]:
        again = redecide(fresh).filter(pl.col("expired") & (pl.col("tier") == "stm"))
        return dict(zip(again["id"].to_list(), again["version"].to_list(), strict=True))

    gone, skipped = delete_rechecked(
        store,
        dict(zip(expire["id"].to_list(), expire["version"].to_list(), strict=True)),
        recheck=recheck,
        actor=EXPIRY_ACTOR,
        action="prune",
        run_id=run_id,
    )
    counts["expired"] = len(gone)
    counts["skipped_concurrent_edit"] += len(skipped)
    return counts


def _frame(rows: list[Memory]) -> pl.DataFrame:
    """Re-read rows (dicts) as a frame of :data:`COLUMNS` with the table's types."""
    schema = polars_schema(COLUMNS)
    return pl.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema, orient="row")
