"""A reviewer's say over corpus-merge plans: reject clusters, discard a plan; older pending plans expire.

A plan (:mod:`engram_pipeline.lifecycle.corpus_merge`) is ``pending`` until it is

- ``applied``, with any of its clusters **rejected** by number (``reject=[2, 5]``; the number is the cluster's
  place in the plan, from 1: the ``cluster`` column of the review table);
- ``discarded`` (:func:`discard_plan`): nothing is merged and nothing is held against its clusters, so a later
  plan may propose them again;
- ``expired``: a newer plan of the same agent was stored (the store changed since this one was made, so it no
  longer says what would be merged). A plan whose apply was interrupted stays pending, so that it can resume.

Applying a discarded or expired plan is refused with :class:`PlanClosed`; nothing is written.

A rejection is durable and auditable: one ``reject_merge`` audit event per row of the rejected cluster (the
actor, the run, the plan, the cluster number and the content hash of every row of the cluster as the reviewer
read it). The planner drops every candidate pair of two rows of one rejected cluster while both rows still
hold that content (:func:`vetoed_pairs`; compared as exact duplicates are, case and spacing aside). The key
is the content, not the version: a decay pass re-scores (and so re-versions) rows daily, and a re-score does
not turn two sentences into one fact; an edit of a row's content lifts the veto on that row's pairs.

>>> sorted(map(sorted, _clique(["c", "m1", "m2"])))
[['c', 'm1'], ['c', 'm2'], ['m1', 'm2']]
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engram_pipeline.model import PlanRecord, content_hash, utcnow
from engram_pipeline.store.errors import InvalidInput, PlanClosed, PlanNotFound

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

APPLY_PASS = "corpus_merge_apply"
REJECT_ACTION = "reject_merge"
CLOSED = ("discarded", "expired")


@dataclass(frozen=True)
class DiscardReport:
    """``discarded`` is False when the plan was closed already (``status`` says how): discarding is idempotent."""

    plan_id: str
    agent_id: str
    status: str
    clusters: int
    discarded: bool


def plan_of(store: MemoryStore, agent_id: str, plan_id: str) -> PlanRecord:
    """The plan ``plan_id``, which must exist and be ``agent_id``'s."""
    plan = store.engine.get_plan(plan_id)
    if plan is None:
        raise PlanNotFound(plan_id)
    if plan["agent_id"] != agent_id:
        raise InvalidInput(f"plan {plan_id} belongs to agent {plan['agent_id']!r}, not {agent_id!r}")
    return plan


def refuse_closed(plan: PlanRecord) -> None:
    """Raise :class:`PlanClosed` for a discarded or expired plan."""
    if plan["status"] in CLOSED:
        raise PlanClosed(str(plan["plan_id"]), plan["status"], plan.get("result"))


def rejected_numbers(plan: PlanRecord, reject: Iterable[int]) -> tuple[int, ...]:
    """``reject`` as sorted distinct cluster numbers of ``plan``; a number outside 1..n is refused."""
    n = len(plan["body"].get("clusters", []))
    numbers = sorted(set(reject))
    bad = [x for x in numbers if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= n]
    if bad:
        listed = f"numbered 1 to {n}" if n else "none to reject"
        raise InvalidInput(f"plan {plan['plan_id']} has {n} clusters ({listed}); cannot reject {bad}")
    return tuple(numbers)


def record_rejections(
    store: MemoryStore,
    plan: PlanRecord,
    numbers: tuple[int, ...],
    *,
    actor: str,
    run_id: str | None,
) -> None:
    """Record the rejected clusters ``numbers`` of ``plan`` (idempotent: an apply resumed records them once).

    Refuses (nothing written) when an interrupted apply of this plan recorded other rejections: which clusters
    the reviewer rejected is not for a rerun to change.
    """
    plan_id, agent_id = str(plan["plan_id"]), str(plan["agent_id"])
    recorded = rejections_of(store, agent_id, plan_id)
    if recorded and recorded != set(numbers):
        raise InvalidInput(
            f"an interrupted apply of plan {plan_id} rejected clusters {sorted(recorded)}; "
            f"apply it again with the same clusters rejected, not {list(numbers)}"
        )
    events = []
    for n in numbers:
        cluster = plan["body"]["clusters"][n - 1]
        rows = [cluster["canonical"], *cluster["members"]]
        hashes = {r["id"]: content_hash(agent_id, r["content"]) for r in rows}
        note = json.dumps(
            {"plan_id": plan_id, "cluster": n, "canonical_id": cluster["canonical"]["id"], "content_hash": hashes},
            sort_keys=True,
        )
        events += [
            {
                "event_id": f"{REJECT_ACTION}:{plan_id}:{n}:{r['id']}",
                "memory_id": r["id"],
                "agent_id": agent_id,
                "action": REJECT_ACTION,
                "after": note,
            }
            for r in rows
        ]
    store.engine.record_audit(events, actor=actor, run_id=run_id)


def _rejection_notes(store: MemoryStore, agent_id: str | Sequence[str]) -> list[dict[str, Any]]:
    """Every rejection of the agent's clusters (or of a sequence of agents': a sweep), once per cluster."""
    table = store.engine.audit_for_agent(agent_id, actions=[REJECT_ACTION])
    return [json.loads(note) for note in sorted(set(table["after"].to_pylist()) - {None})]


def rejections_of(store: MemoryStore, agent_id: str, plan_id: str) -> set[int]:
    """The cluster numbers rejected in plan ``plan_id``."""
    return {int(n["cluster"]) for n in _rejection_notes(store, agent_id) if n["plan_id"] == plan_id}


def vetoed_pairs(store: MemoryStore, agent_id: str | Sequence[str], hashes: Mapping[str, str]) -> set[frozenset[str]]:
    """The pairs of rows of one rejected cluster (of the agent, or of any agent of a sequence) whose content
    (``hashes``: id to current content hash) is still what was rejected: they are not proposed again."""
    pairs: set[frozenset[str]] = set()
    for note in _rejection_notes(store, agent_id):
        unchanged = [i for i, h in note["content_hash"].items() if hashes.get(i) == h]
        pairs.update(_clique(unchanged))
    return pairs


def _clique(ids: list[str]) -> Iterable[frozenset[str]]:
    return (frozenset(p) for p in itertools.combinations(sorted(ids), 2))


def apply_in_progress(store: MemoryStore, agent_id: str, plan_id: str) -> bool:
    """Whether an apply of ``plan_id`` started and has not finished (killed): it resumes, so the plan stays."""
    return _applying(store.engine.get_cursor(APPLY_PASS, agent_id), plan_id)


def _applying(saved: dict[str, Any] | None, plan_id: str) -> bool:
    """Whether the apply cursor ``saved`` is an unfinished apply of ``plan_id``."""
    saved = saved or {}
    return not saved.get("done", True) and saved.get("scope") == {"plan_id": plan_id}


def _run_of(plan: PlanRecord) -> str | None:
    """The run that closed ``plan`` (None: it is open, or its result does not say)."""
    return (plan["result"] or {}).get("run_id")


def expired_by(plan: PlanRecord) -> str | None:
    """The id of the plan whose making expired ``plan`` (None: it did not expire)."""
    return (plan.get("result") or {}).get("expired_by") if plan["status"] == "expired" else None


def expire_superseded(
    store: MemoryStore,
    newest: Mapping[str, str],
    pending: Mapping[str, Sequence[PlanRecord]],
    *,
    run_id: str | None = None,
    before_write: Callable[[], None] = lambda: None,
) -> dict[str, tuple[str, ...]]:
    """Expire, for each agent of ``newest`` (``{agent: the plan just reported}``), its other pending plans
    (``pending``: the agent's pending plans as read before that plan was stored, oldest first, so all older
    than it), but one whose apply is under way; returns the ids each agent's plan expired.

    One compare-and-set from pending per shard for all of them (a plan applied meanwhile stays applied), after
    ``before_write`` (a pass takes its lease there); nothing to expire writes nothing. Each note names the
    ``run_id`` that expired the plan, so that a resumed run can tell what its killed attempt expired
    (:func:`expired_in_run`).
    """
    older = {a: [p for p in pending.get(a, ()) if p["plan_id"] != plan_id] for a, plan_id in newest.items()}
    older = {a: plans for a, plans in older.items() if plans}
    if not older:
        return {}
    applying = store.engine.get_cursors(APPLY_PASS, list(older))
    at = utcnow().isoformat()
    closing = [
        (agent, str(p["plan_id"]), {"expired_by": newest[agent], "expired_at": at, "run_id": run_id})
        for agent, plans in older.items()
        for p in plans
        if not _applying(applying.get(agent), p["plan_id"])
    ]
    if not closing:
        return {}
    before_write()
    closed = store.engine.close_plans(closing, "expired")
    out: dict[str, tuple[str, ...]] = {}
    for agent, plan_id, _ in closing:
        if plan_id in closed:
            out[agent] = (*out.get(agent, ()), plan_id)
    return out


def expired_in_run(store: MemoryStore, newest: Mapping[str, str], run_id: str) -> dict[str, tuple[str, ...]]:
    """The plans each agent's ``newest`` plan expired in run ``run_id`` (oldest first): what a resumed run
    reports, its killed attempts' expiries included."""
    out: dict[str, tuple[str, ...]] = {}
    for agent, plans in store.engine.plans_of_agents(list(newest), status="expired").items():
        ids = [p["plan_id"] for p in plans if expired_by(p) == newest[agent] and _run_of(p) == run_id]
        if ids:
            out[agent] = tuple(map(str, ids))
    return out


def discard_plan(store: MemoryStore, agent_id: str, plan_id: str, *, actor: str = "reviewer") -> DiscardReport:
    """Discard the pending plan ``plan_id`` of ``agent_id`` whole: nothing is merged or held against it.

    A plan discarded or expired already is reported as it is (``discarded=False``). Refused (nothing written):
    an unknown plan (:class:`PlanNotFound`), another agent's, an applied one (``restore`` brings merged rows
    back), one whose apply was interrupted (resume the apply, then restore what should not have been merged).
    """
    plan = plan_of(store, agent_id, plan_id)
    clusters = len(plan["body"].get("clusters", []))
    if plan["status"] == "applied":
        raise InvalidInput(
            f"plan {plan_id} was applied already: restore brings back a merged memory (engram restore ID)"
        )
    if apply_in_progress(store, agent_id, plan_id):
        raise InvalidInput(
            f"an apply of plan {plan_id} was interrupted part way: apply it again to finish, then restore "
            "what should not have been merged"
        )
    note = {"discarded_by": actor, "discarded_at": utcnow().isoformat()}
    if plan["status"] == "pending" and store.engine.close_plan(plan_id, "discarded", note):
        return DiscardReport(plan_id, agent_id, "discarded", clusters, True)
    now = store.engine.get_plan(plan_id)
    assert now is not None
    if now["status"] == "applied":  # applied between our read and our compare-and-set
        raise InvalidInput(f"plan {plan_id} was applied meanwhile: restore brings back a merged memory")
    return DiscardReport(plan_id, agent_id, str(now["status"]), clusters, False)
