"""``/v1/agents/{agent_id}``: health for the agent's keys; lifecycle passes for admin keys.

Every route answers an agent with no memories as unknown (404 naming it), before any pass runs: a pass over
nobody is a typo, not an empty report.

The passes run synchronously in the request (a worker thread) and return their report (see
:mod:`engram_pipeline.reporting`). Their routes are named by the passes' table, :mod:`engram_pipeline.pass_names`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from engram_pipeline import lifecycle
from engram_pipeline.api.deps import AdminDep, AgentDep, KnownAgentDep, PlanIdPath, StoreDep
from engram_pipeline.api.models import (
    ConsolidateRequest,
    CorpusMergeRequest,
    DecayRequest,
    ErrorOut,
    PlanList,
    PlanOut,
    PromoteRequest,
    ReportResponse,
)
from engram_pipeline.lifecycle.merge_review import discard_plan, plan_of
from engram_pipeline.model import PlanStatus
from engram_pipeline.pass_names import PASS_NAMES
from engram_pipeline.reporting import decay_json, health_json
from engram_pipeline.reporting import report_json as as_json

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "the body is not decodable (not UTF-8 JSON)"},
    401: {"model": ErrorOut, "description": "missing or unknown API key"},
    403: {"model": ErrorOut, "description": "the key is not scoped to this agent (or is not an admin key)"},
    404: {"model": ErrorOut, "description": "unknown agent (it has no memories), or no such corpus-merge plan"},
    422: {"model": ErrorOut, "description": "invalid input"},
}

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["agents"], responses=ERRORS)


def _path(pass_name: str) -> str:
    """The route of a lifecycle pass under the router's prefix, as the passes' table names it
    (:data:`engram_pipeline.pass_names.PASS_NAMES`)."""
    route = PASS_NAMES[pass_name].route
    if route is None:
        raise KeyError(f"pass {pass_name} has no HTTP route")
    return f"/{route}"


def _report(pass_name: str, agent_id: str, report: Any) -> ReportResponse:
    return ReportResponse(pass_name=pass_name, agent_id=agent_id, report=as_json(report))


@router.get(_path("health"), response_model=ReportResponse)
def agent_health(agent_id: KnownAgentDep, store: StoreDep) -> ReportResponse:
    """Counts by status, tier and confidence tier, and what the passes last did for this agent
    (``overall_score``, ``tier_distribution``, ``contradiction_count``, ``stale_count``, ...)."""
    report = health_json(lifecycle.health(store, agent_id))
    return ReportResponse(pass_name="health", agent_id=agent_id, report=report)


@router.post(_path("ltm_decay"), response_model=ReportResponse)
def decay(
    _admin: AdminDep, agent_id: KnownAgentDep, store: StoreDep, body: Annotated[DecayRequest | None, Body()] = None
) -> ReportResponse:
    """Run the importance decay pass now (re-score, mark stale, prune with audit) and return its report.

    With ``{"confidence": true}`` the competition-aware confidence decay runs after it. ``decayed_count``,
    ``archived_count`` and ``pruned_count`` sum the report up.
    """
    importance = lifecycle.decay_importance(store, agent_id)
    confidence = None
    if body is not None and body.confidence:
        confidence = lifecycle.decay_confidence(store, agent_id)
    return ReportResponse(pass_name="decay", agent_id=agent_id, report=decay_json(importance, confidence))


@router.post(_path("consolidation"), response_model=ReportResponse)
def consolidate(
    _admin: AdminDep,
    agent_id: KnownAgentDep,
    store: StoreDep,
    body: Annotated[ConsolidateRequest | None, Body()] = None,
) -> ReportResponse:
    """Run the five-stage consolidation (``scope`` recent or full) now and return its report."""
    scope = body.scope if body is not None else "recent"
    return _report("consolidate", agent_id, lifecycle.consolidate(store, agent_id, scope=scope))


@router.post(_path("stm_promotion"), response_model=ReportResponse)
def promote(
    _admin: AdminDep, agent_id: KnownAgentDep, store: StoreDep, _body: Annotated[PromoteRequest | None, Body()] = None
) -> ReportResponse:
    """Run STM to LTM promotion now and return its report."""
    return _report("promote", agent_id, lifecycle.promote_stm(store, agent_id))


@router.post(
    _path("corpus_merge"),
    response_model=ReportResponse,
    responses={409: {"model": ErrorOut, "description": "the plan was discarded, or expired when a newer one was made"}},
)
def corpus_merge(
    admin: AdminDep,
    agent_id: KnownAgentDep,
    store: StoreDep,
    body: Annotated[CorpusMergeRequest | None, Body()] = None,
) -> ReportResponse:
    """Plan the corpus merge, or apply exactly a reviewed plan.

    The default is a dry run: it stores a plan (numbered clusters, member versions) and returns its
    ``plan_id``; memories are not touched. ``{"dry_run": false, "plan_id": "...", "reject": [2]}`` applies
    exactly the reviewed plan but its rejected clusters (recorded, and not proposed again while their memories
    keep their content): a member changed since the review is skipped and counted, and a near-duplicate written
    after it is not merged. A discarded or expired plan is a 409, and nothing is written.
    """
    if body is None or body.dry_run:
        plan = lifecycle.consolidate_corpus
        return _report("corpus_merge", agent_id, plan(store, agent_id, dry_run=True))
    apply = lifecycle.apply_corpus_merge
    report = apply(store, agent_id, body.plan_id, reject=body.reject, actor=admin.actor)
    return _report("corpus_merge", agent_id, report)


@router.get(_path("corpus_merge") + "/plans", response_model=PlanList)
def corpus_merge_plans(agent_id: KnownAgentDep, store: StoreDep, status: PlanStatus | None = None) -> Any:
    """The agent's corpus-merge plans, oldest first (only those with ``status``, e.g. ``pending``, if given)."""
    plans = store.engine.plans_of(agent_id, status=status)
    return {"data": plans, "count": len(plans)}


@router.get(_path("corpus_merge") + "/plans/{plan_id}", response_model=PlanOut)
def corpus_merge_plan(agent_id: AgentDep, plan_id: PlanIdPath, store: StoreDep) -> Any:
    """One plan of the agent with its status and numbered clusters (the numbers ``reject`` takes)."""
    return plan_of(store, agent_id, plan_id)


@router.post(_path("corpus_merge") + "/plans/{plan_id}/discard", response_model=ReportResponse)
def discard_corpus_merge_plan(
    agent_id: AgentDep, plan_id: PlanIdPath, store: StoreDep, admin: AdminDep
) -> ReportResponse:
    """Discard a pending corpus-merge plan whole: nothing is merged and nothing is held against its clusters
    (a later plan may propose them again). Discarding a closed plan reports its status (``discarded: false``)."""
    return _report("corpus_merge", agent_id, discard_plan(store, agent_id, plan_id, actor=admin.actor))
