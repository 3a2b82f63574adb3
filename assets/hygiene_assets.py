"""Corpus hygiene: contradiction detection, and the review-gated corpus merge (plan, then apply).

The plan is a dry run: its materialization shows the clusters a reviewer approves. Applying is a separate
job, ``corpus_merge_apply_job``, launched with the plan id (default: the partition's latest pending plan).
"""

from typing import Any

from dagster import AssetExecutionContext, Config, Failure, MaterializeResult, asset
from pydantic import Field

from assets._report import merge_review, report_metadata, run_id_of, run_pass, timed
from assets.partitions import PASS_RETRY, agents
from assets.resources import EngramStore
from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus

GROUP = "hygiene"


class CorpusMergeApplyConfig(Config):
    plan_id: str | None = Field(
        default=None, description="the reviewed plan to apply; empty: the partition's latest pending plan"
    )


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
    meta = report_metadata("Corpus merge plan (dry run)", report, duration_s=seconds, omit=("per_cluster",))
    return MaterializeResult(metadata={**meta, **merge_review(report)})


@asset(partitions_def=agents, deps=[corpus_merge_plan], retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def corpus_merge_apply(
    context: AssetExecutionContext, config: CorpusMergeApplyConfig, engram: EngramStore
) -> MaterializeResult:
    """Apply exactly one reviewed plan; members changed since the review are skipped and reported."""
    store, agent = engram.open(), context.partition_key
    try:
        report, seconds = timed(apply_corpus_merge, store, agent, config.plan_id, run_id=run_id_of(context))
    except (LookupError, ValueError) as exc:  # an unknown plan id, or another agent's: retrying cannot help
        raise Failure(description=str(exc), allow_retries=False) from exc
    meta = report_metadata("Corpus merge apply", report, duration_s=seconds, omit=("per_cluster",))
    return MaterializeResult(metadata={**meta, **merge_review(report)})
