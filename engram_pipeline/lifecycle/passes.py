"""The pass registry: each pass once, with every name it goes by and the functions that run it.

A pass has one name here (what ``lifecycle.sweep`` runs, the shard assets sweep and the pass metrics report);
the names already written into a store keep their spelling, and the registry says which: the cursors a pass
stores its progress under and the actors its audit events record (renaming either would orphan the cursors and
audit rows of every existing store). ``run`` is the pass for one agent, ``sweep`` the columnar pass over one
shard's agents (the same decisions, :mod:`.sweep`), ``report`` the dataclass both return per agent.

>>> PASSES["ltm_decay"].report.__name__, PASSES["ltm_decay"].cursor
('DecayReport', 'ltm_decay')
>>> sorted(p.name for p in PASSES.values() if not p.actors)
['corpus_merge', 'health', 'pipeline']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engram_pipeline.lifecycle import (
    archival,
    beliefs,
    confidence,
    consolidation,
    contradictions,
    corpus_merge,
    decay,
    episodes,
    pipeline,
    promotion,
)
from engram_pipeline.lifecycle.health import HealthReport, health, health_sweep
from engram_pipeline.pass_names import PASS_NAMES, PassNames


@dataclass(frozen=True)
class Pass:
    name: str  # the one name: sweeps, shard assets, pass metrics
    run: Callable[..., Any]  # one agent: (store, agent_id, *, now=...) -> report
    sweep: Callable[..., dict[str, Any]]  # one shard's agents: (store, agent_ids, *, now=, run_id=) -> {agent: report}
    report: type  # what ``run`` returns, and ``sweep`` per agent
    cursor: str | None  # the name its cursors are stored under (stored data: spelled as first written)
    actors: tuple[str, ...]  # the actors its audit events record (stored data); none: it writes no audit event

    @property
    def public(self) -> PassNames:
        """What the shells call it (its asset, command, route): :mod:`engram_pipeline.pass_names`."""
        return PASS_NAMES[self.name]


PASSES: dict[str, Pass] = {
    p.name: p
    for p in (
        Pass(
            "stm_promotion",
            promotion.promote_stm,
            promotion.promotion_sweep,
            promotion.PromotionReport,
            promotion.PASS_NAME,
            (promotion.ACTOR, promotion.EXPIRY_ACTOR),
        ),
        Pass(
            "ltm_decay", decay.decay_importance, decay.decay_sweep, decay.DecayReport, decay.PASS_NAME, (decay.ACTOR,)
        ),
        Pass(
            "confidence_decay",
            confidence.decay_confidence,
            confidence.confidence_sweep,
            confidence.ConfidenceDecayReport,
            confidence.PASS,
            (confidence.ACTOR,),
        ),
        Pass(
            "contradictions",
            contradictions.detect_contradictions,
            contradictions.contradiction_sweep,
            contradictions.ContradictionReport,
            contradictions.PASS_NAME,
            (contradictions.ACTOR,),
        ),
        Pass(
            "archival",
            archival.archive_faded,
            archival.archival_sweep,
            archival.ArchivalReport,
            archival.PASS_NAME,
            (archival.ACTOR,),
        ),
        # the five stages over recent episodes (scope "recent": what the consolidation schedule runs)
        Pass(
            "consolidation",
            consolidation.consolidate,
            consolidation.consolidation_sweep,
            consolidation.ConsolidationReport,
            episodes.CONSOLIDATE_PASS,
            (beliefs.ACTOR,),
        ),
        # the plan only (a dry run): an apply is per agent, after review (corpus_merge.APPLY_PASS, corpus_merge.ACTOR)
        Pass(
            "corpus_merge",
            corpus_merge.consolidate_corpus,
            corpus_merge.plan_sweep,
            corpus_merge.CorpusMergeReport,
            corpus_merge.PLAN_PASS,
            (),
        ),
        # ``health`` is also the package's name for the function, so the module's names come in by name
        Pass("health", health, health_sweep, HealthReport, None, ()),
        Pass("pipeline", pipeline.run_pipeline, pipeline.pipeline_sweep, pipeline.PipelineReport, None, ()),
    )
}
