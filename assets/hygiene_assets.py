"""Corpus hygiene: contradiction detection, and the review-gated corpus merge (plan, then apply).

The plan is a dry run: its materialization shows the numbered clusters a reviewer approves or rejects.
Applying is a separate job, ``corpus_merge_apply_job``, launched with the plan id (default: the partition's
only pending plan) and the numbers of the clusters to reject, or with ``discard`` to close the plan whole.
"""

from typing import Any

from dagster import AssetExecutionContext, Config, Failure, MaterializeResult, asset
from pydantic import Field

from assets._report import merge_review, report_metadata, run_id_of, run_pass, timed
from assets.partitions import PASS_RETRY, agents
from assets.resources import EngramStore
from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus
from engram_pipeline.lifecycle.merge_review import discard_plan

GROUP = "hygiene"
ACTOR = "dagster"  # who rejected clusters or discarded a plan, in the audit (the run id is recorded with it)


class CorpusMergeApplyConfig(Config):
    plan_id: str | None = Field(
        default=None, description="the reviewed plan to apply; empty: the partition's only pending plan"
    )
    reject: list[int] = Field(
        default=[],
        description="numbers of the clusters not to merge (the review table's cluster column); they are "
        "recorded and not proposed again while their memories keep their content",
    )
    discard: bool = Field(default=False, description="discard the plan (plan_id) whole instead of applying it")


@asset(partitions_def=agents, retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def contradictions(context: AssetExecutionContext, engram: EngramStore, neighbour_graph: Any) -> MaterializeResult:
    """Similar pairs whose claims conflict are flagged (or the older superseded, per policy)."""
    return run_pass(
        "Contradictions",
        detect_contradictions,
        engram.open(),
        context.partition_key,
        graph=neighbour_graph,
        run_id=run_id_of(context),
    )


@asset(partitions_def=agents, deps=[contradictions], retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def corpus_merge_plan(context: AssetExecutionContext, engram: EngramStore, neighbour_graph: Any) -> MaterializeResult:
    """Dry run: the near-duplicate clusters to merge, stored as a plan for review. Memories are not touched."""
    store, agent = engram.open(), context.partition_key
    report, seconds = timed(
        consolidate_corpus, store, agent, dry_run=True, graph=neighbour_graph, run_id=run_id_of(context)
    )
    omit = ("per_cluster", "rejected")  # a plan rejects nothing; the review table shows the clusters
    meta = report_metadata("Corpus merge plan (dry run)", report, duration_s=seconds, omit=omit)
    return MaterializeResult(metadata={**meta, **merge_review(report)})


@asset(partitions_def=agents, deps=[corpus_merge_plan], retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def corpus_merge_apply(
    context: AssetExecutionContext, config: CorpusMergeApplyConfig, engram: EngramStore
) -> MaterializeResult:
    """Apply exactly one reviewed plan but its rejected clusters (or discard it); members changed since the
    review are skipped and reported."""
    store, agent = engram.open(), context.partition_key
    try:
        if config.discard:
            return _discard(store, agent, config)
        report, seconds = timed(
            apply_corpus_merge,
            store,
            agent,
            config.plan_id,
            reject=config.reject,
            actor=ACTOR,
            run_id=run_id_of(context),
        )
    except (LookupError, ValueError) as exc:  # an unknown, closed or other agent's plan: retrying cannot help
        raise Failure(description=str(exc), allow_retries=False) from exc
    meta = report_metadata("Corpus merge apply", report, duration_s=seconds, omit=("per_cluster", "expired"))
    return MaterializeResult(metadata={**meta, **merge_review(report)})


def _discard(store: Any, agent: str, config: CorpusMergeApplyConfig) -> MaterializeResult:
    if not config.plan_id or config.reject:
        raise ValueError("discard names the plan to discard (plan_id) and rejects no cluster (it closes them all)")
    report, seconds = timed(discard_plan, store, agent, config.plan_id, actor=ACTOR)
    return MaterializeResult(metadata=report_metadata("Corpus merge plan discarded", report, duration_s=seconds))
