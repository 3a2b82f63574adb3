"""Benchmark a backfill over every agent partition, end to end through the Dagster daemon.

    python bench/bench_backfill.py                    # 20 agents (the figure the README quotes)
    python bench/bench_backfill.py --agents 4         # quick run

Data: ``--agents`` agents, each a copy of one of the four sample agents (40-60 memories each: episodes,
contradicting facts, rephrasings, stale rows), written with the ``--embedder`` (default hashing: the passes
read stored vectors only, so the embedder changes the seeding time, not the passes).

Measured in one run, on two copies of the same store:
(a) the backfill: ``python -m assets.backfill``'s :func:`launch_backfill` submits every per-agent asset of
    ``full_pipeline_job`` over all partitions to a temporary instance (this repo's ``dagster.yaml``: queued runs,
    two at a time), and a real ``dagster-daemon`` runs it; timed from submission until every run has finished
    and the backfill is marked complete;
(b) the reference: the same assets for every agent, one ``execute_in_process`` run after another in this
    process (no daemon, no run workers), as ``make demo`` does.
The ratio (a)/(b) is the price (or gain) of launching runs through the daemon and the run queue.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "assets"))  # the helpers that run Dagster's processes

from results import Results  # noqa: E402

PIPELINE_JOB = "full_pipeline_job"


def seed(uri: str, agents: int, embedder: str) -> list[str]:
    from engram_pipeline.importer import import_jsonl
    from engram_pipeline.sample import AGENTS, load_sample_corpus
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore

    store = MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": embedder}))
    sample = load_sample_corpus()
    names = list(AGENTS)
    ids = [f"agent-{n:02d}" for n in range(agents)]
    lines = []
    for n, agent in enumerate(ids):
        source = names[n % len(names)]
        for line in sample:
            if line["agent_id"] == source:
                copy = {**line, "agent_id": agent}
                if copy.get("id"):
                    copy["id"] = f"{agent}-{copy['id']}"
                lines.append(copy)
    import_jsonl(store, lines)
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    results = Results("backfill", args)

    with tempfile.TemporaryDirectory(prefix="bench_backfill_") as tmp:
        base = Path(tmp)
        uri, ref_uri = str(base / "store" / "lancedb"), str(base / "reference" / "lancedb")
        start = time.perf_counter()
        agents = seed(uri, args.agents, args.embedder)
        shutil.copytree(uri, ref_uri)
        seeded = time.perf_counter() - start
        print(f"seeded {len(agents)} agents ({args.embedder}) in {seeded:.1f} s")
        results.add("seed", agents=len(agents), seconds=seeded)

        from dagster_procs import dagster_env, dagster_processes, make_dagster_home

        home = make_dagster_home(base / "dagster")
        env = dagster_env(home, store_uri=uri, embedder=args.embedder)
        os.environ.update({k: env[k] for k in ("DAGSTER_HOME", "ENGRAM_HOME", "ENGRAM_DB_URI", "ENGRAM_EMBEDDER")})
        from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

        from assets.backfill import launch_backfill, wait_for_backfill
        from assets.definitions import defs
        from assets.partitions import AGENTS

        keys = [k.to_user_string() for k in defs.resolve_job_def(PIPELINE_JOB).asset_layer.executable_asset_keys]
        with DagsterInstance.get() as instance:
            instance.add_dynamic_partitions(AGENTS, agents)
            with dagster_processes(env, webserver=False) as procs:
                time.sleep(5)  # let the daemon's code server load before the clock starts
                procs.check_alive()
                start = time.perf_counter()
                backfill_id = launch_backfill(instance, defs, keys, title="bench_backfill")
                status = wait_for_backfill(instance, backfill_id, timeout=args.timeout)
                backfill_s = time.perf_counter() - start
            runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
            done = [r for r in runs if r.status == DagsterRunStatus.SUCCESS]
            durations = [
                s.end_time - s.start_time
                for s in instance.get_run_records(RunsFilter(tags={"dagster/backfill": backfill_id}))
                if s.start_time and s.end_time
            ]
        print(f"(a) backfill {backfill_id}: {status.value}, {len(done)}/{len(runs)} runs succeeded")
        print(f"    {len(keys)} assets x {len(agents)} agents in {backfill_s:.1f} s end to end")
        if durations:
            print(f"    run duration median {statistics.median(durations):.1f} s, max {max(durations):.1f} s")
        results.add(
            "backfill",
            status=status.value,
            runs_succeeded=len(done),
            runs=len(runs),
            assets=len(keys),
            agents=len(agents),
            seconds=backfill_s,
            run_median_s=statistics.median(durations) if durations else None,
            run_max_s=max(durations) if durations else None,
        )

        os.environ["ENGRAM_DB_URI"] = ref_uri
        from assets.resources import engram_resources

        job = defs.resolve_job_def(PIPELINE_JOB)
        resources = engram_resources()  # bound to the reference copy of the store
        quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
        with DagsterInstance.ephemeral() as scratch:
            scratch.add_dynamic_partitions(AGENTS, agents)
            start = time.perf_counter()
            for agent in agents:
                job.execute_in_process(instance=scratch, partition_key=agent, run_config=quiet, resources=resources)
            reference_s = time.perf_counter() - start
        print(f"(b) reference, in process one agent after another: {reference_s:.1f} s")
        print(
            f"backfill / reference: {backfill_s / reference_s:.2f}x "
            f"({backfill_s / len(agents):.2f} s vs {reference_s / len(agents):.2f} s per agent)"
        )
        results.add(
            "reference",
            seconds=reference_s,
            backfill_over_reference=backfill_s / reference_s,
            backfill_s_per_agent=backfill_s / len(agents),
            reference_s_per_agent=reference_s / len(agents),
        )
        results.save()
        return 0 if len(done) == len(runs) == len(agents) else 1


if __name__ == "__main__":
    sys.exit(main())
