"""Jobs: what each schedule runs, one shard partition per run; the per-agent jobs, one agent partition per run,
for the human-scale flows (a merge plan to review, a backfill of a few agents) and the whole pipeline for
``make demo``.

Applying a corpus merge is never part of a scheduled job: it is ``corpus_merge_apply_job``, launched by a
person with the reviewed plan id and the clusters to reject
(``ops: {corpus_merge_apply: {config: {plan_id: ..., reject: [2]}}}`` in the launchpad), or ``discard: true``;
the plan's materialization links to that launchpad with the config filled in (``hygiene_assets.act_on_plan``).
"""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from assets.consolidation_assets import archival, beliefs, episode_clusters, procedures, schemas
from assets.graph_assets import neighbour_graph
from assets.health_assets import memory_health
from assets.hygiene_assets import APPLY_JOB, contradictions, corpus_merge_apply, corpus_merge_plan
from assets.maintenance_assets import confidence_decay, importance_decay, stm_promotion, store_maintenance
from assets.shard_assets import shard_key

stm_promotion_job = define_asset_job(
    "stm_promotion_job",
    AssetSelection.assets(stm_promotion),
    description="Promote short-term memories that earned it to long-term memory.",
)
decay_job = define_asset_job(
    "decay_job",
    AssetSelection.assets(importance_decay, neighbour_graph, confidence_decay),
    description="Importance decay (stale, prune) and competition-aware confidence decay.",
)
consolidation_job = define_asset_job(
    "consolidation_job",
    AssetSelection.assets(neighbour_graph, contradictions, episode_clusters, beliefs, procedures, schemas, archival),
    description="Contradictions, then the five stages: episode clusters, beliefs, procedures, schemas, archival.",
)
corpus_merge_plan_job = define_asset_job(
    "corpus_merge_plan_job",
    AssetSelection.assets(neighbour_graph, corpus_merge_plan),
    description="Dry run: plan the corpus merge for review. Nothing is merged.",
)
corpus_merge_apply_job = define_asset_job(
    APPLY_JOB,
    AssetSelection.assets(corpus_merge_apply),
    description="Apply exactly one reviewed plan (config plan_id, and reject: cluster numbers not to merge), "
    "or discard it (discard: true).",
)
health_job = define_asset_job(
    "health_job",
    AssetSelection.assets(memory_health),
    description="Memory health report and chart.",
)
maintenance_job = define_asset_job(
    "maintenance_job",
    AssetSelection.assets(store_maintenance),
    description="Compact the store's tables and clean up old versions.",
)
# Every per-agent pass but the merge apply, in lineage order: what `make demo` runs for each agent.
full_pipeline_job = define_asset_job(
    "full_pipeline_job",
    AssetSelection.assets(
        stm_promotion,
        importance_decay,
        neighbour_graph,
        confidence_decay,
        contradictions,
        corpus_merge_plan,
        episode_clusters,
        beliefs,
        procedures,
        schemas,
        archival,
        memory_health,
    ),
    description="Every per-agent pass but the merge apply (which waits for review), then the health report.",
)

# The scheduled maintenance: each run sweeps every agent of one shard.
stm_promotion_shard_job = define_asset_job(
    "stm_promotion_shard_job",
    AssetSelection.assets(shard_key("stm_promotion")),
    description="STM promotion for every agent of one shard.",
)
decay_shard_job = define_asset_job(
    "decay_shard_job",
    AssetSelection.assets(shard_key("importance_decay"), shard_key("confidence_decay")),
    description="Importance decay, then confidence decay, for every agent of one shard.",
)
consolidation_shard_job = define_asset_job(
    "consolidation_shard_job",
    AssetSelection.assets(shard_key("contradictions"), shard_key("consolidation")),
    description="Contradictions, then the five stages over recent episodes, for every agent of one shard.",
)
health_shard_job = define_asset_job(
    "health_shard_job",
    AssetSelection.assets(shard_key("memory_health")),
    description="The memory health report of every agent of one shard.",
)
full_pipeline_shard_job = define_asset_job(
    "full_pipeline_shard_job",
    AssetSelection.assets(shard_key("pipeline")),
    description="Every pass but the merge apply, for every agent of one shard (merge plans wait for review).",
)

shard_jobs = [
    stm_promotion_shard_job,
    decay_shard_job,
    consolidation_shard_job,
    health_shard_job,
    full_pipeline_shard_job,
]
all_jobs = [
    *shard_jobs,
    stm_promotion_job,
    decay_job,
    consolidation_job,
    corpus_merge_plan_job,
    corpus_merge_apply_job,
    health_job,
    maintenance_job,
    full_pipeline_job,
]
