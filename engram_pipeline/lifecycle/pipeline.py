"""Every per-agent pass in lineage order, as one library call: what Dagster's ``full_pipeline_job`` runs.

STM promotion, importance decay, the neighbour graph, confidence decay, contradictions, the corpus merge plan
(a dry run: applying waits for review), the five consolidation stages and the health report, all at one
``now``. Tests, benchmarks and the CLI use it to run the pipeline at a simulated time without a Dagster
instance; the Dagster job materialises the same passes as separate assets.

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> _ = store.remember("alice", "User lives in Berlin")
>>> run_pipeline(store, "alice").health.total
1
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from engram_pipeline.lifecycle.confidence import ConfidenceDecayReport, decay_confidence
from engram_pipeline.lifecycle.consolidation import ConsolidationReport, consolidate
from engram_pipeline.lifecycle.contradictions import ContradictionReport, detect_contradictions
from engram_pipeline.lifecycle.corpus_merge import CorpusMergeReport, consolidate_corpus
from engram_pipeline.lifecycle.decay import DecayReport, decay_importance
from engram_pipeline.lifecycle.graph import agent_graph
from engram_pipeline.lifecycle.health import HealthReport, health
from engram_pipeline.lifecycle.promotion import PromotionReport, promote_stm
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
    now = now or utcnow()
    promotion = promote_stm(store, agent_id, now=now)
    decay = decay_importance(store, agent_id, now=now)
    graph = agent_graph(store, agent_id)
    confidence = decay_confidence(store, agent_id, graph=graph, now=now)
    contradictions = detect_contradictions(store, agent_id, graph=graph, now=now)
    plan = consolidate_corpus(store, agent_id, dry_run=True, graph=graph, now=now)
    stages = consolidate(store, agent_id, scope=scope, graph=graph, now=now)
    report = health(store, agent_id, now=now)
    return PipelineReport(promotion, decay, confidence, contradictions, plan, stages, report)
