"""``make demo``: the sample corpus through the whole pipeline, run by Dagster on a persistent local instance.

1. Loads the bundled four-agent sample corpus into the store (``ENGRAM_HOME``, default ``./.engram``) for the
   agents that are not there yet; a second run reuses the store as it is.
2. Opens the Dagster instance in ``DAGSTER_HOME`` (default ``<ENGRAM_HOME>/dagster``, with the project's
   ``dagster.yaml``) and registers one ``agents`` partition per agent.
3. Runs every per-agent pass as one run per agent (the lineage order of the code location), then store
   maintenance. The runs are recorded in the instance, so ``make ui`` shows them, their metadata and the
   merge plans waiting for review.
4. Prints what each pass did per agent and the health score, and what a recall finds for each agent.

The corpus merge is review-gated: the demo plans it (dry run) and leaves applying to the reviewer
(``corpus_merge_apply_job`` in the UI), unless ``--apply-merges`` is given.

    python -m assets.demo [--agents a,b] [--apply-merges] [--import-only]

``--import-only`` stops after step 1 and prints the recalls (no Dagster). This is the only demo: ``make demo``
and ``engram demo`` both run this module; it lives in ``assets`` because it drives Dagster, which the library
never imports.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from assets.instance import prepare_environment

# A materialization's metadata entries that are not a count of what the pass did.
NOT_COUNTS = {"duration_s", "floor", "mean_score"}
PIPELINE_JOB = "full_pipeline_job"  # every per-agent pass but the merge apply, in lineage order
MAINTENANCE_JOB = "maintenance_job"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass(frozen=True)
class AgentSummary:
    """What one agent's pipeline run did: per asset, its numeric metadata."""

    agent_id: str
    run_id: str
    success: bool
    seconds: float
    passes: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


def load_sample(store: Any, agents: Sequence[str] | None = None, *, out: TextIO = sys.stdout) -> list[str]:
    """Import the sample corpus for the sample agents (or ``agents``) that have no memories yet.

    Agents already in the store are left alone: re-importing would bring back rows a pass pruned.
    """
    from engram_pipeline.importer import import_jsonl
    from engram_pipeline.sample import AGENTS, load_sample_corpus

    wanted = list(agents or AGENTS)
    present = set(store.agents())
    missing = [a for a in wanted if a not in present]
    if missing:
        lines = [line for line in load_sample_corpus() if line["agent_id"] in set(missing)]
        start = time.perf_counter()
        # exact dedup only: the corpus holds near-duplicates and contradictions for the passes to find
        report = import_jsonl(store, lines, checks="exact")
        print(
            f"loaded the sample corpus for {', '.join(missing)}: {report.created} memories "
            f"({store.embedder.name} embedder, {time.perf_counter() - start:.1f} s)",
            file=out,
        )
    if present & set(wanted):
        print(f"reusing the store for {', '.join(sorted(present & set(wanted)))}", file=out)
    return wanted


def run_partition(
    job: Any, instance: Any, agent: str | None, run_config: Mapping[str, Any] | None = None
) -> AgentSummary:
    """One run of ``job`` for one agent partition (or unpartitioned), recorded in ``instance``."""
    start = time.perf_counter()
    result = job.execute_in_process(
        instance=instance,
        partition_key=agent,
        run_config={**QUIET, **(run_config or {})},
        tags={"engram/launched_by": "demo"},
        raise_on_error=False,
    )
    passes: dict[str, dict[str, float]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        passes[materialization.asset_key.to_user_string()] = {
            name: value.value
            for name, value in materialization.metadata.items()
            if isinstance(value.value, int | float) and not isinstance(value.value, bool) and name not in NOT_COUNTS
        }
    return AgentSummary(agent or job.name, result.run_id, result.success, time.perf_counter() - start, passes)


def print_summary(summary: AgentSummary, *, out: TextIO = sys.stdout) -> None:
    state = "ok" if summary.success else "FAILED (see the run in the UI)"
    print(f"\n[{summary.agent_id}] run {summary.run_id[:8]}: {state}, {summary.seconds:.1f} s", file=out)
    for name, counts in summary.passes.items():
        shown = " ".join(f"{k}={_fmt(v)}" for k, v in counts.items() if k != "skipped_concurrent_edit" or v)
        print(f"  {name:<20} {shown}", file=out)


def _fmt(value: float) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: Sequence[str] | None = None, *, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="python -m assets.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", help="comma-separated sample agents (default: all four)")
    parser.add_argument("--apply-merges", action="store_true", help="also apply each agent's latest merge plan")
    parser.add_argument("--import-only", action="store_true", help="only load the sample and recall (no Dagster)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    from engram_pipeline.embed import EmbedderError
    from engram_pipeline.extras import MissingExtra, require
    from engram_pipeline.settings import Settings, SettingsError
    from engram_pipeline.store import MemoryStore, StoreError

    try:
        if not args.import_only:  # before anything is written: the whole demo runs its passes through Dagster
            require("dagster", "the full demo (`--import-only` needs no Dagster)")
        env = prepare_environment(dagster=not args.import_only)
        store = MemoryStore.open(settings=Settings.from_env())
    except (MissingExtra, SettingsError, StoreError, EmbedderError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    where = "" if args.import_only else f"; Dagster instance: {env['DAGSTER_HOME']}"
    print(f"store: {store.uri} ({store.embedder.name}){where}", file=out)
    agents = load_sample(store, [a for a in (args.agents or "").split(",") if a] or None, out=out)
    if args.import_only:
        print_recalls(store, agents, out=out)
        return 0

    # Imported once the environment is set: the code location binds its resources from it.
    from dagster import DagsterInstance

    from assets.definitions import defs
    from assets.hygiene_assets import APPLY_JOB
    from assets.partitions import AGENTS

    ok = True
    with DagsterInstance.get() as instance:
        new = [a for a in agents if not instance.has_dynamic_partition(AGENTS, a)]
        if new:
            instance.add_dynamic_partitions(AGENTS, new)
        pipeline = defs.resolve_job_def(PIPELINE_JOB)
        print(
            f"partitions: {len(agents)} agents ({len(new)} new); {PIPELINE_JOB}: "
            f"{len(list(pipeline.asset_layer.executable_asset_keys))} passes per agent",
            file=out,
        )
        for agent in agents:
            summaries = [run_partition(pipeline, instance, agent)]
            if args.apply_merges:
                summaries.append(run_partition(defs.resolve_job_def(APPLY_JOB), instance, agent))
            for summary in summaries:
                ok &= summary.success
                print_summary(summary, out=out)
        summary = run_partition(defs.resolve_job_def(MAINTENANCE_JOB), instance, None)
        ok &= summary.success
        print_summary(summary, out=out)
    _print_review_hint(store, agents, applied=args.apply_merges, out=out)
    print_recalls(store, agents, out=out)
    print(f"\ndemo finished in {time.perf_counter() - started:.1f} s; `make ui` shows the runs", file=out)
    return 0 if ok else 1


def print_recalls(store: Any, agents: Sequence[str], *, out: TextIO) -> None:
    """Each sample agent's demo query and its three best memories (not counted as accesses)."""
    from engram_pipeline.sample import AGENTS

    for agent in agents:
        query = AGENTS[agent]["query"]
        print(f"\n[{agent}] recall: {query!r}", file=out)
        for hit in store.recall(agent, query, k=3, track_access=False):
            m = hit.memory
            print(f"  {hit.score:.3f}  {m['kind']:<10} {m['status']:<12} {m['content']}", file=out)


def _print_review_hint(store: Any, agents: Sequence[str], *, applied: bool, out: TextIO) -> None:
    if applied:
        return
    pending = [(a, p) for a in agents if (p := store.engine.latest_plan(a)) and p["status"] == "pending"]
    # A plan with no cluster has nothing to review: it is not "waiting".
    waiting = [(a, p, clusters) for a, p in pending if (clusters := p["body"].get("clusters", []))]
    if waiting:
        print(
            "\nmerge plans waiting for review (asset corpus_merge_plan; apply with corpus_merge_apply_job):", file=out
        )
        for agent, plan, clusters in waiting:
            members = sum(len(c.get("members", [])) for c in clusters)
            print(
                f"  {agent:<20} {plan['plan_id']}  {len(clusters)} clusters, would merge {members} memories", file=out
            )
    # an agent with nothing to merge has no pending plan at all (a dry run that finds no cluster stores none)
    idle = sorted(set(agents) - {a for a, _, _ in waiting})
    if idle:
        print(f"\nnothing to merge for {', '.join(idle)}", file=out)


if __name__ == "__main__":
    sys.exit(main())
