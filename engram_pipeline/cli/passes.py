"""Lifecycle pass commands: decay, decay-confidence, promote, consolidate-corpus (and discard-plan),
consolidate, health, maintain.

Each runs one library function per agent (``--agent A``, repeatable, or ``--all-agents``) and prints its
frozen report: a table with one row per agent, or with ``--json`` a list of ``{"agent_id", "report"}``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from engram_pipeline.cli._common import (
    CliError,
    State,
    emit_json,
    jsonable,
    print_record,
    print_table,
    state,
    warn,
)
from engram_pipeline.reporting import report_view

AgentOpt = Annotated[list[str] | None, typer.Option("--agent", help="an agent id (repeatable)")]
AllOpt = Annotated[bool, typer.Option("--all-agents", help="every agent in the store")]

LIFECYCLE = "engram_pipeline.lifecycle"


def _agents(st: State, agent: list[str] | None, all_agents: bool) -> list[str]:
    if bool(agent) == all_agents:
        raise CliError("give --agent A (repeatable) or --all-agents, not both and not neither")
    return st.store.agents() if all_agents else st.known_agents(agent or [])


def _run(st: State, agents: list[str], fn: Callable[[str], Any]) -> None:
    """Run ``fn`` per agent and print the reports."""
    results = [(a, fn(a)) for a in agents]
    if st.json:
        emit_json([{"agent_id": a, "report": _json_report(r)} for a, r in results])
        return
    if not results:
        warn("no agents")
        return
    if len(results) == 1:
        typer.echo(f"agent {results[0][0]}")
        print_record(_summary(results[0][1]))
        return
    rows = [{"agent_id": a, **_summary(r)} for a, r in results]
    print_table(rows, list(rows[0]), width=40)


def _json_report(report: Any) -> Any:
    value = jsonable(report)
    return report_view(value) if isinstance(value, dict) else value


def _summary(report: Any) -> dict[str, Any]:
    """A report's fields for a table; collections are shown by their size."""
    if not dataclasses.is_dataclass(report) or isinstance(report, type):
        return {"result": report}
    out: dict[str, Any] = {}
    for name, value in report_view({f.name: getattr(report, f.name) for f in dataclasses.fields(report)}).items():
        if isinstance(value, list | tuple | set | frozenset) and len(value) > 3:
            value = f"{len(value)} items"
        elif isinstance(value, dict) and len(value) > 4:
            value = f"{len(value)} entries"
        out[name] = value
    return out


def _lib(module: str, name: str) -> Callable[..., Any]:
    from engram_pipeline.cli._common import library

    return library(f"{LIFECYCLE}.{module}", name)


def decay(ctx: typer.Context, agent: AgentOpt = None, all_agents: AllOpt = False) -> None:
    """Re-score importance; mark stale, prune (audited) what faded and is old and not pinned."""
    st = state(ctx)
    fn = _lib("decay", "decay_importance")
    _run(st, _agents(st, agent, all_agents), lambda a: fn(st.store, a))


def decay_confidence(ctx: typer.Context, agent: AgentOpt = None, all_agents: AllOpt = False) -> None:
    """Competition-aware confidence decay."""
    st = state(ctx)
    fn = _lib("confidence", "decay_confidence")
    _run(st, _agents(st, agent, all_agents), lambda a: fn(st.store, a))


def promote(ctx: typer.Context, agent: AgentOpt = None, all_agents: AllOpt = False) -> None:
    """Move short-term memories that earned it (accesses and importance) to long-term memory."""
    st = state(ctx)
    fn = _lib("promotion", "promote_stm")
    _run(st, _agents(st, agent, all_agents), lambda a: fn(st.store, a))


PlanOpt = Annotated[
    str | None, typer.Option(help="the reviewed plan to apply (default: the agent's only pending plan)")
]
RejectOpt = Annotated[
    str | None,
    typer.Option(metavar="N,N", help="with --apply --plan-id: the numbers of the clusters not to merge, e.g. 2,5"),
]
ACTOR = "cli"  # who rejected clusters or discarded a plan, in the audit


def consolidate_corpus(
    ctx: typer.Context,
    agent: AgentOpt = None,
    all_agents: AllOpt = False,
    apply: Annotated[
        bool, typer.Option("--apply", help="applies exactly the reviewed plan (default: dry run)")
    ] = False,
    plan_id: PlanOpt = None,
    reject: RejectOpt = None,
) -> None:
    """Plan the corpus merge of near-duplicates (dry run: prints the numbered clusters), or apply exactly a
    reviewed plan with --apply, rejecting the clusters given with --reject.

    With --plan-id the agent is the plan's (--agent may be left out). Without --plan-id, --apply takes each
    agent's only pending plan and says which; an agent with several pending plans, or whose only pending plan
    expired another, is refused (nothing is applied), so that a plan made after the review is never applied in
    its place. A rejected cluster is recorded and not proposed again while its memories keep their content.
    """
    st = state(ctx)
    if plan_id is not None and not apply:
        raise CliError("--plan-id is only used with --apply")
    if reject is not None and plan_id is None:
        raise CliError("--reject numbers the clusters of one reviewed plan: give --apply --plan-id too")
    numbers = _cluster_numbers(reject)
    agents = _plan_agent(st, plan_id) if plan_id is not None and not agent and not all_agents else None
    agents = agents or _agents(st, agent, all_agents)
    if plan_id is not None and len(agents) != 1:
        raise CliError("--plan-id names one agent's plan: give exactly one --agent")
    reports: dict[str, Any] = {}
    if apply:
        fn = _lib("corpus_merge", "apply_corpus_merge")
        choose = _lib("corpus_merge", "plan_to_apply")
        chosen = {a: choose(st.store, a, plan_id) for a in agents}  # refuses before anything is applied
        for a, plan in chosen.items():
            if plan is None:
                warn(f"agent {a}: no pending corpus-merge plan; nothing to apply")
            elif plan_id is None:
                warn(f"agent {a}: applying {plan['plan_id']}, its only pending plan")

        def run(a: str) -> Any:
            chosen_id = chosen[a]["plan_id"] if chosen[a] else None
            reports[a] = fn(st.store, a, chosen_id, reject=numbers, actor=ACTOR)
            return reports[a]

        _run(st, agents, run)
    else:
        fn = _lib("corpus_merge", "consolidate_corpus")
        _run(st, agents, lambda a: reports.setdefault(a, fn(st.store, a, dry_run=True)))
    if not st.json:
        for a, report in reports.items():
            _print_review(a, report)


def discard_plan(
    ctx: typer.Context,
    plan_id: Annotated[str, typer.Argument(help="the plan to discard (its agent is the plan's)")],
) -> None:
    """Discard a pending corpus-merge plan whole: nothing is merged, and nothing is held against its clusters."""
    st = state(ctx)
    (agent_id,) = _plan_agent(st, plan_id)
    fn = _lib("merge_review", "discard_plan")
    _run(st, [agent_id], lambda a: fn(st.store, a, plan_id, actor=ACTOR))


def _plan_agent(st: State, plan_id: str) -> list[str]:
    """The agent of plan ``plan_id`` (an unknown plan is an error that says so)."""
    from engram_pipeline.store import PlanNotFound

    plan = st.store.get_plan(plan_id)
    if plan is None:
        raise PlanNotFound(plan_id)
    return [str(plan["agent_id"])]


def _cluster_numbers(reject: str | None) -> list[int]:
    """``"2,5"`` as ``[2, 5]``."""
    if reject is None:
        return []
    try:
        return [int(n) for n in reject.replace(" ", "").split(",") if n]
    except ValueError:
        raise CliError(f"--reject takes cluster numbers separated by commas, e.g. 2,5; got {reject!r}") from None


def _print_review(agent_id: str, report: Any) -> None:
    """The plan's numbered clusters, as a reviewer reads them (the numbers are what --reject takes)."""
    rows: list[dict[str, Any]] = []
    for c in report.per_cluster:
        rows.append(
            {"cluster": c["cluster"], "role": "canonical", "outcome": c.get("outcome"), "content": c["canonical"]}
        )
        rows += [
            {"cluster": c["cluster"], "role": "member", "similarity": m["similarity"], "outcome": m.get("outcome"),
             "content": m["content"]}
            for m in c["members"]
        ]  # fmt: skip
    if not rows:
        return
    typer.echo(f"\nplan {report.plan_id} of agent {agent_id}:")
    columns = ["cluster", "role", "similarity", *(["outcome"] if not report.dry_run else []), "content"]
    print_table(rows, columns, width=100)


def consolidate(
    ctx: typer.Context,
    agent: AgentOpt = None,
    all_agents: AllOpt = False,
    scope: Annotated[str, typer.Option(help="recent: new episodes since the last run; full: everything")] = "recent",
) -> None:
    """Five-stage consolidation: episodes, beliefs, procedures, schemas, archival."""
    if scope not in ("recent", "full"):
        raise CliError(f"--scope must be recent or full; got {scope!r}")
    st = state(ctx)
    fn = _lib("consolidation", "consolidate")
    _run(st, _agents(st, agent, all_agents), lambda a: fn(st.store, a, scope=scope))


def health(
    ctx: typer.Context,
    agent: AgentOpt = None,
    all_agents: AllOpt = False,
    plot: Annotated[Path | None, typer.Option(help="write a chart (one file per agent when several)")] = None,
) -> None:
    """Counts by status, tier and confidence tier, and what the passes would do next."""
    st = state(ctx)
    fn = _lib("health", "health")
    agents = _agents(st, agent, all_agents)
    _run(st, agents, lambda a: fn(st.store, a))
    if plot is not None:
        chart = _lib("health", "health_chart")
        for a in agents:
            path = plot if len(agents) == 1 else plot.with_name(f"{plot.stem}-{_safe(a)}{plot.suffix}")
            chart(st.store, a, path)
            warn(f"wrote {path}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80] or "agent"


def maintain(ctx: typer.Context) -> None:
    """Compact the tables, clean up old versions and build the indexes."""
    st = state(ctx)
    report = st.store.maintain()
    if st.json:
        emit_json(report)
    else:
        print_record(_summary(report))
