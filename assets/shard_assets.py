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
from engram_pipeline.pass_names import PASS_NAMES

PREFIX = "shards"
GROUP = "shards"

# pass -> (title, what its shard asset materialises, the passes whose shard assets it runs after). Each shard asset
# is named by its pass's asset (engram_pipeline.pass_names: the keys carry Dagster's history), under shards/.
_SWEEPS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "stm_promotion": ("STM promotion", "Short-term memories that earned it move to LTM.", ()),
    "ltm_decay": (
        "Importance decay",
        "Every memory re-scored; faded ones turn stale, forgotten ones are pruned (audited).",
        ("stm_promotion",),
    ),
    "confidence_decay": (
        "Confidence decay",
        "Competition-aware confidence decay; rows under the floor are archived.",
        ("ltm_decay",),
    ),
    "contradictions": (
        "Contradictions",
        "Similar pairs whose claims conflict are flagged (or superseded, per policy).",
        ("ltm_decay",),
    ),
    "consolidation": (
        "Consolidation",
        "The five stages over recent episodes: clusters, beliefs, procedures, schemas, archival.",
        ("confidence_decay", "contradictions"),
    ),
    "health": (
        "Memory health",
        "Each agent's health report after the passes (the chart is on the per-agent asset).",
        ("stm_promotion", "ltm_decay", "contradictions", "consolidation"),
    ),
    "pipeline": (
        "Full pipeline",
        "Every pass but the merge apply in lineage order, as sweeps but the consolidation stages (the merge plans "
        "wait for review).",
        (),
    ),
}


def _asset(pass_name: str) -> str:
    name = PASS_NAMES[pass_name].asset
    if name is None:
        raise KeyError(f"pass {pass_name} has no asset")
    return name


# asset name -> (the sweep's pass, title, what it materialises, the shard assets it runs after)
SWEPT: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    _asset(p): (p, title, description, tuple(_asset(a) for a in after))
    for p, (title, description, after) in _SWEEPS.items()
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
