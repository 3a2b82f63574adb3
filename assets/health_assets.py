"""Memory health: one agent's counts by status, tier and confidence band, with a chart in the UI."""

import base64
import tempfile
from pathlib import Path
from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from assets._report import report_metadata, timed
from assets.consolidation_assets import archival
from assets.hygiene_assets import contradictions, corpus_merge_plan
from assets.maintenance_assets import importance_decay, stm_promotion
from assets.partitions import PASS_RETRY, agents
from assets.resources import EngramStore
from engram_pipeline.lifecycle.health import agent_confidences, health, render_health_chart


@asset(
    partitions_def=agents,
    deps=[stm_promotion, importance_decay, contradictions, corpus_merge_plan, archival],
    retry_policy=PASS_RETRY,
    group_name="health",
    kinds={"lancedb", "matplotlib"},
)
def memory_health(context: AssetExecutionContext, engram: EngramStore, neighbour_graph: Any) -> MaterializeResult:
    """The agent's memory health after the passes, and its chart (embedded in the materialization)."""
    store, agent = engram.open(), context.partition_key
    report, seconds = timed(health, store, agent, graph=neighbour_graph)
    with tempfile.TemporaryDirectory() as tmp:
        png = render_health_chart(report, agent_confidences(store, agent), Path(tmp) / "health.png").read_bytes()
    chart = f"![memory health of {agent}](data:image/png;base64,{base64.b64encode(png).decode()})"
    meta = report_metadata(f"Memory health of {agent}", report, duration_s=seconds)
    return MaterializeResult(metadata={**meta, "chart": MetadataValue.md(chart)})
