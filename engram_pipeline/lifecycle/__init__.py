"""The lifecycle passes: one module per mechanism, each a function over a store and one agent that returns a
frozen report, writes through the batched compare-and-set, resumes from its cursor and is idempotent.

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> _ = store.remember("alice", "User lives in Berlin")
>>> from engram_pipeline.lifecycle import decay_importance
>>> decay_importance(store, "alice").pruned
0
"""

from engram_pipeline.lifecycle.confidence import ConfidenceDecayReport, decay_confidence
from engram_pipeline.lifecycle.consolidation import (
    ConsolidationReport,
    archive_faded,
    cluster_episodes,
    consolidate,
    derive_schemas,
    detect_procedures,
    extract_beliefs,
)
from engram_pipeline.lifecycle.contradictions import ContradictionReport, detect_contradictions
from engram_pipeline.lifecycle.corpus_merge import CorpusMergeReport, apply_corpus_merge, consolidate_corpus
from engram_pipeline.lifecycle.decay import DecayReport, decay_importance
from engram_pipeline.lifecycle.graph import agent_graph
from engram_pipeline.lifecycle.health import HealthReport, health, health_chart
from engram_pipeline.lifecycle.promotion import PromotionReport, promote_stm

__all__ = [
    "ConfidenceDecayReport",
    "ConsolidationReport",
    "ContradictionReport",
    "CorpusMergeReport",
    "DecayReport",
    "HealthReport",
    "PromotionReport",
    "agent_graph",
    "apply_corpus_merge",
    "archive_faded",
    "cluster_episodes",
    "consolidate",
    "consolidate_corpus",
    "decay_confidence",
    "decay_importance",
    "derive_schemas",
    "detect_contradictions",
    "detect_procedures",
    "extract_beliefs",
    "health",
    "health_chart",
    "promote_stm",
]
