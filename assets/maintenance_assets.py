"""Maintenance passes: STM promotion, importance decay, confidence decay, and store maintenance."""

from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, asset

from assets._report import run_id_of, run_pass
from assets.partitions import PASS_RETRY, agents
from assets.resources import EngramStore
from engram_pipeline.lifecycle.confidence import decay_confidence
from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.lifecycle.promotion import promote_stm

GROUP = "maintenance"


@asset(partitions_def=agents, retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def stm_promotion(context: AssetExecutionContext, engram: EngramStore) -> MaterializeResult:
    """Short-term memories that earned it (accesses, importance) move to long-term memory; expired ones go."""
    return run_pass("STM promotion", promote_stm, engram.open(), context.partition_key, run_id=run_id_of(context))


@asset(partitions_def=agents, deps=[stm_promotion], retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def importance_decay(context: AssetExecutionContext, engram: EngramStore) -> MaterializeResult:
    """Re-score every memory; faded ones turn stale, forgotten ones are pruned (audited, restorable)."""
    return run_pass(
        "Importance decay", decay_importance, engram.open(), context.partition_key, run_id=run_id_of(context)
    )


@asset(partitions_def=agents, retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb", "numpy"})
def confidence_decay(context: AssetExecutionContext, engram: EngramStore, neighbour_graph: Any) -> MaterializeResult:
    """Competition-aware confidence decay over the neighbour graph; rows under the floor are archived."""
    return run_pass(
        "Confidence decay",
        decay_confidence,
        engram.open(),
        context.partition_key,
        graph=neighbour_graph,
        run_id=run_id_of(context),
    )


@asset(retry_policy=PASS_RETRY, group_name=GROUP, kinds={"lancedb"})
def store_maintenance(engram: EngramStore) -> MaterializeResult:
    """Compact every table and drop old versions (every commit makes one), then ensure the indexes."""
    return run_pass("Store maintenance", engram.open().maintain)
