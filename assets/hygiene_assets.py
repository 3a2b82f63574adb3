"""Corpus hygiene: contradiction detection, and the review-gated corpus merge (plan, then apply).

The plan is a dry run: its materialization shows the numbered clusters a reviewer approves or rejects, and
above them two links to ``corpus_merge_apply_job``'s launchpad with the run config prefilled for this plan and
partition (:func:`act_on_plan`): applying or discarding is a click on **Launch Run**, without typing the plan id
(rejecting clusters is typing their numbers into ``reject``). The job can also be launched by hand with the
plan id (default: the partition's only pending plan), or with ``discard`` to close the plan whole.

The plan's own page says where it stands: its materialization records ``status: pending``, and each apply or
discard, or a launch refused because the plan closed meanwhile (applied, discarded, or expired by a newer plan),
records the plan's status then as an observation of ``corpus_merge_plan`` in the same partition
(:func:`observe_plan`), listed under the plan's materialization in the asset's events.
"""

from typing import Any
from urllib.parse import quote, urlencode

import yaml
from dagster import (
    AssetExecutionContext,
    AssetObservation,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from pydantic import Field

from assets._report import location_of, merge_review, report_metadata, run_id_of, run_pass, timed
from assets.partitions import PASS_RETRY, agents
from assets.resources import EngramStore
from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus
from engram_pipeline.lifecycle.merge_review import discard_plan

GROUP = "hygiene"
APPLY_JOB = "corpus_merge_apply_job"
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
    act = act_on_plan(context, agent, report.plan_id, engram.settings().ui_path_prefix)  # first: above the fold
    status = {"status": MetadataValue.text("pending")} if report.plan_id else {}
    return MaterializeResult(metadata={**act, **status, **meta, **merge_review(report)})


@asset(partitions_def=agents, deps=[corpus_merge_plan], retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def corpus_merge_apply(
    context: AssetExecutionContext, config: CorpusMergeApplyConfig, engram: EngramStore
) -> MaterializeResult:
    """Apply exactly one reviewed plan but its rejected clusters (or discard it); members changed since the
    review are skipped and reported."""
    store, agent = engram.open(), context.partition_key
    try:
        if config.discard:
            discarded = _discard(store, agent, config)
            observe_plan(context, store, agent, config.plan_id)
            return discarded
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
        observe_plan(context, store, agent, config.plan_id)  # closed: the plan's page says how
        raise Failure(description=str(exc), allow_retries=False) from exc
    observe_plan(context, store, agent, report.plan_id)
    meta = report_metadata("Corpus merge apply", report, duration_s=seconds, omit=("per_cluster", "expired"))
    return MaterializeResult(metadata={**meta, **merge_review(report)})


def observe_plan(context: AssetExecutionContext, store: Any, agent: str, plan_id: str | None) -> None:
    """Record plan ``plan_id``'s status now (``pending``, ``applied``, ``discarded``, ``expired``) as an
    observation of ``corpus_merge_plan`` in ``agent``'s partition; nothing for an unknown or other agent's plan."""
    plan = store.engine.get_plan(plan_id) if plan_id else None
    if plan is None or plan["agent_id"] != agent:
        return
    metadata = {"plan_id": MetadataValue.text(str(plan_id)), "status": MetadataValue.text(str(plan["status"]))}
    context.log_event(AssetObservation(asset_key=corpus_merge_plan.key, partition=agent, metadata=metadata))


def act_on_plan(
    context: AssetExecutionContext, agent: str, plan_id: str | None, path_prefix: str = ""
) -> dict[str, Any]:
    """``act``: links to the apply job's launchpad in this code location, prefilled with this partition and a
    run config naming ``plan_id`` (one to apply it with ``reject: []``, one to discard it); none without a plan,
    or outside a run launched from a code location (:func:`location_of`).

    The links are absolute paths on the UI's host, so they hold for whatever host and port serve it; under
    the UI's ``path_prefix`` (``ENGRAM_UI_PATH_PREFIX``, dagster-webserver's ``--path-prefix``)."""
    location = location_of(context)
    if not plan_id or location is None:
        return {}
    op = corpus_merge_apply.op.name
    setup = f"{path_prefix}/locations/__repository__@{quote(location)}/jobs/{APPLY_JOB}/playground/setup"

    def launchpad(config: CorpusMergeApplyConfig, *fields: str) -> str:
        run_config = {"ops": {op: {"config": config.model_dump(include=set(fields))}}}
        tags = {"tags[0][key]": "dagster/partition", "tags[0][value]": agent}
        return f"{setup}?{urlencode({'config': yaml.safe_dump(run_config, sort_keys=False), **tags})}"

    apply = launchpad(CorpusMergeApplyConfig(plan_id=plan_id), "plan_id", "reject")
    discard = launchpad(CorpusMergeApplyConfig(plan_id=plan_id, discard=True), "plan_id", "discard")
    text = (
        f"**Plan `{plan_id}` was stored pending.** [Apply this plan]({apply}) (the launchpad opens with its id "
        "and partition filled in: list the numbers of clusters to keep apart in `reject`, then **Launch Run**) "
        f"or [discard it]({discard}). A plan applied, discarded or expired since is refused, and the run says so."
    )
    return {"act": MetadataValue.md(text)}


def _discard(store: Any, agent: str, config: CorpusMergeApplyConfig) -> MaterializeResult:
    if not config.plan_id or config.reject:
        raise ValueError("discard names the plan to discard (plan_id) and rejects no cluster (it closes them all)")
    report, seconds = timed(discard_plan, store, agent, config.plan_id, actor=ACTOR)
    return MaterializeResult(metadata=report_metadata("Corpus merge plan discarded", report, duration_s=seconds))
