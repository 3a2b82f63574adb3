"""Lifecycle pass commands: decay, decay-confidence, promote, contradictions, neighbour-graph,
consolidate-corpus (and discard-plan), consolidate, health, maintain, migrate.

Each runs one library function per agent (``--agent A``, repeatable, or ``--all-agents``) and prints its
frozen report (serialised by :mod:`engram_pipeline.reporting`): a table with one row per agent, or with
``--json`` a list of ``{"agent_id", "report"}``. On a terminal, stderr shows a progress bar over the agents.
The passes are imported inside the command that runs them, so that ``engram --help`` stays fast.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from engram_pipeline.cli._common import (
    AgentsOpt,
    AllOpt,
    CliError,
    Scope,
    State,
    emit_json,
    print_record,
    print_table,
    state,
    tracked,
    warn,
)
from engram_pipeline.extras import require
from engram_pipeline.reporting import report_fields, report_json


def _agents(st: State, agent: list[str] | None, all_agents: bool) -> list[str]:
    if bool(agent) == all_agents:
        raise CliError("give --agent A (repeatable) or --all-agents, not both and not neither")
    return st.store.agents() if all_agents else st.known_agents(agent or [])


def _run(st: State, agents: list[str], fn: Callable[[str], Any]) -> None:
    """Run ``fn`` per agent (a progress bar on a terminal's stderr) and print the reports."""
    results = [(a, fn(a)) for a in tracked(st.command or "pass", agents)]
    if st.json:
        emit_json([{"agent_id": a, "report": report_json(r)} for a, r in results])
        return
    if not results:
        warn("no agents")
        return
    if len(results) == 1:
        typer.echo(f"agent {results[0][0]}")
        print_record(_summary(results[0][1]))
        return
    rows = [{"agent_id": a, **_summary(r)} for a, r in results]
    print_table(rows, list(rows[0]))


def _summary(report: Any) -> dict[str, Any]:
    """A report's fields for a table; collections are shown by their size."""
    try:
        fields = report_fields(report)
    except TypeError:
        return {"result": report}
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, list | tuple | set | frozenset) and len(value) > 3:
            value = f"{len(value)} items"
        elif isinstance(value, dict) and len(value) > 4:
            value = f"{len(value)} entries"
        out[name] = value
    return out


def decay(ctx: typer.Context, agent: AgentsOpt = None, all_agents: AllOpt = False) -> None:
    """Re-score importance; mark stale, prune (audited) what faded and is old and not pinned."""
    st = state(ctx)
    from engram_pipeline.lifecycle.decay import decay_importance as fn

    _run(st, _agents(st, agent, all_agents), lambda a: fn(st.store, a))


def decay_confidence(ctx: typer.Context, agent: AgentsOpt = None, all_agents: AllOpt = False) -> None:
    """Competition-aware confidence decay."""
    st = state(ctx)
    from engram_pipeline.lifecycle.confidence import decay_confidence as fn

    _run(st, _agents(st, agent, all_agents), lambda a: fn(st.store, a))


def promote(ctx: typer.Context, agent: AgentsOpt = None, all_agents: AllOpt = False) -> None:
    """Move short-term memories that earned it (accesses and importance) to long-term memory."""
    st = state(ctx)
    from engram_pipeline.lifecycle.promotion import promote_stm as fn

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
    agent: AgentsOpt = None,
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
        from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, plan_to_apply

        chosen = {a: plan_to_apply(st.store, a, plan_id) for a in agents}  # refuses before anything is applied
        for a, plan in chosen.items():
            if plan is None:
                warn(f"agent {a}: no pending corpus-merge plan; nothing to apply")
            elif plan_id is None:
                warn(f"agent {a}: applying {plan['plan_id']}, its only pending plan")

        def run(a: str) -> Any:
            plan = chosen[a]
            chosen_id = plan["plan_id"] if plan is not None else None
            reports[a] = apply_corpus_merge(st.store, a, chosen_id, reject=numbers, actor=ACTOR)
            return reports[a]

        _run(st, agents, run)
    else:
        from engram_pipeline.lifecycle.corpus_merge import consolidate_corpus

        _run(st, agents, lambda a: reports.setdefault(a, consolidate_corpus(st.store, a, dry_run=True)))
    if not st.json:
        for a, report in reports.items():
            _print_review(a, report)


def discard_plan(
    ctx: typer.Context,
    plan_id: Annotated[str, typer.Argument(help="the plan to discard (its agent is the plan's)")],
) -> None:
    """Discard a pending corpus-merge plan whole: nothing is merged, and nothing is held against its clusters."""
    st = state(ctx)
    from engram_pipeline.lifecycle.merge_review import discard_plan as discard

    (agent_id,) = _plan_agent(st, plan_id)
    _run(st, [agent_id], lambda a: discard(st.store, a, plan_id, actor=ACTOR))


def _plan_agent(st: State, plan_id: str) -> list[str]:
    """The agent of plan ``plan_id`` (an unknown plan is an error that says so)."""
    from engram_pipeline.store import PlanNotFound

    plan = st.store.engine.get_plan(plan_id)
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
    print_table(rows, columns)


def consolidate(
    ctx: typer.Context,
    agent: AgentsOpt = None,
    all_agents: AllOpt = False,
    scope: Annotated[Scope, typer.Option(help="recent: new episodes since the last run; full: everything")] = "recent",
) -> None:
    """Five-stage consolidation: episodes, beliefs, procedures, schemas, archival."""
    st = state(ctx)
    from engram_pipeline.lifecycle.consolidation import consolidate as fn

    _run(st, _agents(st, agent, all_agents), lambda a: fn(st.store, a, scope=scope))


def contradictions(ctx: typer.Context, agent: AgentsOpt = None, all_agents: AllOpt = False) -> None:
    """Flag (or, with MEMORY_CONTRADICTION_POLICY=supersede, supersede) contradicting pairs of similar memories."""
    from engram_pipeline.lifecycle.contradictions import detect_contradictions as fn

    st = state(ctx)
    _run(st, _agents(st, agent, all_agents), lambda a: fn(st.store, a))


def neighbour_graph(ctx: typer.Context, agent: AgentsOpt = None, all_agents: AllOpt = False) -> None:
    """The similar pairs of each agent's memories that the passes start from (read only): pairs, floor, scores."""
    from engram_pipeline.lifecycle.graph import agent_graph as graph_of
    from engram_pipeline.lifecycle.graph import graph_floor

    st = state(ctx)
    floor = graph_floor(st.settings)

    def summary(agent_id: str) -> dict[str, Any]:
        scores = graph_of(st.store, agent_id, floor=floor)["score"].to_numpy()
        return {
            "pairs": len(scores),
            "floor": floor,
            "mean_score": float(scores.mean()) if len(scores) else None,
            "max_score": float(scores.max()) if len(scores) else None,
        }

    _run(st, _agents(st, agent, all_agents), summary)


def health(
    ctx: typer.Context,
    agent: AgentsOpt = None,
    all_agents: AllOpt = False,
    plot: Annotated[Path | None, typer.Option(help="write a chart (one file per agent when several)")] = None,
) -> None:
    """Counts by status, tier and confidence tier, and what the passes would do next."""
    st = state(ctx)
    from engram_pipeline.lifecycle.health import health as fn

    if plot is not None:  # before any work: a missing extra is the whole answer
        require("plot", "engram health --plot")
    agents = _agents(st, agent, all_agents)
    _run(st, agents, lambda a: fn(st.store, a))
    if plot is not None:
        from engram_pipeline.lifecycle.health import health_chart as chart

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


def migrate(
    ctx: typer.Context,
    shards: Annotated[int, typer.Option("--shards", min=1, help="the shard count to re-shard the store into")],
) -> None:
    """Re-shard the store into --shards N (resumable: run it again after an interruption). Stop every process
    that uses the store first; afterwards set ENGRAM_SHARDS=N wherever it is opened."""
    from engram_pipeline.store.migrate import migrate as run

    st = state(ctx)
    report = run(st.settings.resolved_db_uri, shards=shards, settings=st.settings)
    if st.json:
        emit_json(report)
    else:
        print_record(_summary(report))
        if report.source != report.target:
            warn(f"the store now has {report.target} shard(s): set ENGRAM_SHARDS={report.target} where it is opened")
