"""Shard sweeps: the scheduled maintenance, one run per shard sweeping every agent in it.

Each asset is one pass over the agents of one ``shards`` partition (``lifecycle.sweep``): the same passes, at
one ``now``, that the per-agent assets run for one agent, so a schedule tick costs ``ENGRAM_SHARDS`` runs
however many agents the store holds. The materialization reports the totals and a table of per-agent figures
(the busiest agents; the store keeps every report's effects and cursors). The keys sit under ``shards/``
beside the per-agent assets they sweep (``shards/importance_decay`` next to ``importance_decay``); the
per-agent health chart stays on ``memory_health``.
"""

from dagster import AssetExecutionContext, AssetKey, AssetsDefinition, MaterializeResult, PartitionsDefinition, asset

from assets._report import run_id_of, sweep_metadata, timed
from assets.partitions import PASS_RETRY, shards
from assets.resources import EngramStore
from engram_pipeline.lifecycle.sweep import sweep

PREFIX = "shards"
GROUP = "shards"

# asset name -> (the sweep's pass, title, what it materialises, the shard assets it runs after)
SWEPT: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "stm_promotion": ("stm_promotion", "STM promotion", "Short-term memories that earned it move to LTM.", ()),
    "importance_decay": (
        "ltm_decay",
        "Importance decay",
        "Every memory re-scored; faded ones turn stale, forgotten ones are pruned (audited).",
        ("stm_promotion",),
    ),
    "confidence_decay": (
        "confidence_decay",
        "Confidence decay",
        "Competition-aware confidence decay; rows under the floor are archived.",
        ("importance_decay",),
    ),
    "contradictions": (
        "contradictions",
        "Contradictions",
        "Similar pairs whose claims conflict are flagged (or superseded, per policy).",
        ("importance_decay",),
    ),
    "consolidation": (
        "consolidation",
        "Consolidation",
        "The five stages over recent episodes: clusters, beliefs, procedures, schemas, archival.",
        ("confidence_decay", "contradictions"),
    ),
    "memory_health": (
        "health",
        "Memory health",
        "Each agent's health report after the passes (the chart is on the per-agent asset).",
        ("stm_promotion", "importance_decay", "contradictions", "consolidation"),
    ),
    "pipeline": (
        "pipeline",
        "Full pipeline",
        "Every pass but the merge apply in lineage order, as sweeps but the consolidation stages (the merge plans "
        "wait for review).",
        (),
    ),
}


def shard_key(name: str) -> AssetKey:
    """The key of the shard asset ``name`` (``shards/<name>``)."""
    return AssetKey([PREFIX, name])


def shard_sweep(name: str, partitions_def: PartitionsDefinition) -> AssetsDefinition:
    """The shard asset ``name`` of :data:`SWEPT`, partitioned by ``partitions_def``."""
    pass_name, title, description, after = SWEPT[name]

    @asset(
        name=name,
        key_prefix=PREFIX,
        description=description,
        partitions_def=partitions_def,
        deps=[shard_key(d) for d in after],
        retry_policy=PASS_RETRY,
        group_name=GROUP,
        kinds={"lancedb"},
    )
    def _sweep(context: AssetExecutionContext, engram: EngramStore) -> MaterializeResult:
        store = engram.open()
        agents = store.engine.agents_in_shard(int(context.partition_key))
        report, seconds = timed(sweep, store, pass_name, agents, run_id=run_id_of(context))
        return MaterializeResult(
            metadata=sweep_metadata(f"{title}, shard {context.partition_key}", report, duration_s=seconds)
        )

    return _sweep


def shard_sweeps(partitions_def: PartitionsDefinition = shards) -> list[AssetsDefinition]:
    """Every shard asset (tests build them over another shard count)."""
    return [shard_sweep(name, partitions_def) for name in SWEPT]


shard_assets = shard_sweeps()
