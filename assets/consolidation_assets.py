"""Five-stage consolidation: episode clusters, beliefs, procedures, schemas, archival.

Episodes that resemble each other are clustered once per run; beliefs and procedures are distilled from those
clusters (handed over through ``run_scoped_io_manager``; a stage run on its own clusters again), schemas are
derived from the beliefs, and what faded below the archive confidence is archived (audited, restorable).
"""

from typing import Any, Literal

from dagster import AssetExecutionContext, Config, MaterializeResult, Output, asset
from pydantic import Field

from assets._report import report_metadata, run_id_of, run_pass, timed
from assets.maintenance_assets import confidence_decay
from assets.partitions import PASS_RETRY, agents
from assets.resources import EngramStore
from engram_pipeline.lifecycle.archival import archive_faded
from engram_pipeline.lifecycle.beliefs import extract_beliefs
from engram_pipeline.lifecycle.episodes import cluster_episodes, record_watermark
from engram_pipeline.lifecycle.procedures import detect_procedures
from engram_pipeline.lifecycle.schemas import derive_schemas

GROUP = "consolidation"


class EpisodeClustersConfig(Config):
    scope: Literal["recent", "full"] = Field(
        default="recent", description="recent: episodes since the last consolidation; full: every episode"
    )


@asset(
    partitions_def=agents,
    io_manager_key="run_scoped_io_manager",
    retry_policy=PASS_RETRY,
    group_name=GROUP,
    kinds={"lancedb", "numpy"},
)
def episode_clusters(
    context: AssetExecutionContext, config: EpisodeClustersConfig, engram: EngramStore, neighbour_graph: Any
) -> Output[Any]:
    """Groups of similar episodes (stage 1): what beliefs and procedures are distilled from."""
    clusters, seconds = timed(
        cluster_episodes, engram.open(), context.partition_key, scope=config.scope, graph=neighbour_graph
    )
    return Output(clusters, metadata=report_metadata("Episode clusters", clusters, duration_s=seconds))


@asset(partitions_def=agents, retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def beliefs(context: AssetExecutionContext, engram: EngramStore, episode_clusters: Any) -> MaterializeResult:
    """Claims that recur across episodes become belief memories, with confidence from their support (stage 2)."""
    store, agent = engram.open(), context.partition_key
    # Run on its own (no clusters from this run), the stage clusters the recent episodes itself.
    clusters = episode_clusters or cluster_episodes(store, agent, scope="recent")
    return run_pass("Beliefs", extract_beliefs, store, agent, clusters, run_id=run_id_of(context))


@asset(partitions_def=agents, retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def procedures(context: AssetExecutionContext, engram: EngramStore, episode_clusters: Any) -> MaterializeResult:
    """Trigger-action episodes that mostly succeeded become procedural memories (stage 3)."""
    # Recent clusters narrow the search to patterns with a new episode; without them every episode counts.
    recent = episode_clusters if episode_clusters is not None and episode_clusters.scope == "recent" else None
    return run_pass(
        "Procedures", detect_procedures, engram.open(), context.partition_key, recent, run_id=run_id_of(context)
    )


@asset(partitions_def=agents, deps=[beliefs], retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def schemas(context: AssetExecutionContext, engram: EngramStore) -> MaterializeResult:
    """Beliefs about one subject with enough attributes become a schema memory (stage 4)."""
    return run_pass("Schemas", derive_schemas, engram.open(), context.partition_key, run_id=run_id_of(context))


@asset(
    partitions_def=agents,
    deps=[confidence_decay, beliefs, procedures, schemas],
    retry_policy=PASS_RETRY,
    group_name=GROUP,
    kinds={"lancedb"},
)
def archival(context: AssetExecutionContext, engram: EngramStore, episode_clusters: Any) -> MaterializeResult:
    """Memories whose confidence fell below the archive floor are archived, audited and restorable (stage 5)."""
    store = engram.open()
    result = run_pass("Archival", archive_faded, store, context.partition_key, run_id=run_id_of(context))
    if episode_clusters is not None:  # this run consumed the recent episodes: the next one starts after them
        record_watermark(store, context.partition_key, episode_clusters)
    return result
