"""Every per-agent pass in lineage order, as one library call: what Dagster's ``full_pipeline_job`` runs.

STM promotion, importance decay, the neighbour graph, confidence decay, contradictions, the corpus merge plan
(a dry run: applying waits for review), the five consolidation stages and the health report, all at one
``now``. Tests, benchmarks and the CLI use it to run the pipeline at a simulated time without a Dagster
instance; the Dagster job materialises the same passes as separate assets.

:func:`pipeline_sweep` runs it over a set of agents of one shard: promotion, importance decay, the neighbour
graph (each agent's, from one read), confidence decay, contradictions, the corpus merge plan and the five
consolidation stages as columnar sweeps (one cursor per shard each; the plans of all the agents stored in one
commit; consolidation keeps each agent's ``recent`` watermark in that agent's own cursor row), then the health
reports from one read of every agent (:func:`~engram_pipeline.lifecycle.health.health_sweep`).
:func:`run_pipeline` is the sweep of one agent.

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> _ = store.remember("alice", "User lives in Berlin")
>>> run_pipeline(store, "alice").health.total
1
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from engram_pipeline.lifecycle._gc import fewer_collections
from engram_pipeline.lifecycle.confidence import ConfidenceDecayReport, confidence_sweep
from engram_pipeline.lifecycle.consolidation import ConsolidationReport, consolidation_sweep
from engram_pipeline.lifecycle.contradictions import ContradictionReport, contradiction_sweep
from engram_pipeline.lifecycle.corpus_merge import CorpusMergeReport, plan_sweep
from engram_pipeline.lifecycle.decay import DecayReport, decay_sweep
from engram_pipeline.lifecycle.graph import agent_graph
from engram_pipeline.lifecycle.health import HealthReport, health_sweep
from engram_pipeline.lifecycle.promotion import PromotionReport, promotion_sweep
from engram_pipeline.model import utcnow

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore


@dataclass(frozen=True)
class PipelineReport:
    promotion: PromotionReport
    decay: DecayReport
    confidence: ConfidenceDecayReport
    contradictions: ContradictionReport
    merge_plan: CorpusMergeReport
    consolidation: ConsolidationReport
    health: HealthReport


def run_pipeline(
    store: MemoryStore, agent_id: str, *, now: datetime | None = None, scope: str = "recent"
) -> PipelineReport:
    """Run every per-agent pass but the merge apply for ``agent_id`` at ``now`` (default: the current time)."""
    return pipeline_sweep(store, [agent_id], now=now, scope=scope)[agent_id]


def pipeline_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    now: datetime | None = None,
    scope: str = "recent",
    run_id: str | None = None,
) -> dict[str, PipelineReport]:
    """:func:`run_pipeline` for every agent of ``agent_ids`` (all of one shard), the columnar passes as sweeps."""
    agents = sorted(set(agent_ids))
    if not agents:
        return {}
    now = now or utcnow()
    with fewer_collections():
        promotion = promotion_sweep(store, agents, now=now, run_id=run_id)
        decay = decay_sweep(store, agents, now=now, run_id=run_id)
        graph = agent_graph(store, agents)
        confidence = confidence_sweep(store, agents, graph=graph, now=now, run_id=run_id)
        contradictions = contradiction_sweep(store, agents, graph=graph, now=now, run_id=run_id)
        plans = plan_sweep(store, agents, graph=graph, now=now, run_id=run_id)
        stages = consolidation_sweep(store, agents, scope=scope, graph=graph, now=now, run_id=run_id)
        health = health_sweep(store, agents, now=now)  # after every stage: what the agents' memory is now
    return {
        agent: PipelineReport(
            promotion[agent],
            decay[agent],
            confidence[agent],
            contradictions[agent],
            plans[agent],
            stages[agent],
            health[agent],
        )
        for agent in agents
    }
