"""Benchmark the distributed profile against the local one on the same corpus and machine, and 1 against 2 workers.

    python bench/bench_distributed.py          # 16 agents x 50 memories, 4 shards, 1 then 2 workers
    python bench/bench_distributed.py --agents 600 --memories 100   # the size docs/scale.md quotes last (about 20 min)

Data: ``--agents`` agents of ``--memories`` memories each (``bench_many_agents.corpus_lines``: distinct sentences,
a mix of tiers, kinds, ages and accesses, hashing embedder), ``ENGRAM_SHARDS=--shards``.

Measured in one run, each on its own store imported from the same lines:
(a) local: ``full_pipeline_shard_job`` over every shard, one ``execute_in_process`` run after another in this
    process, the store in a local directory (the local profile's work without the daemon's launch cost);
(b) distributed, for each ``--workers`` W: the local cluster (``deploy/local_cluster.py``: Postgres, Redis, Ceph
    RGW on 127.0.0.1), ``deploy/dagster.yaml``'s instance, a ``dagster-daemon`` and W ``dagster-celery`` workers
    (solo pool), the store on RGW; one backfill of ``full_pipeline_shard_job`` over every shard, timed from the
    submission until every run has succeeded (the daemon's launch and the run queue included), and each run's
    own duration from its record. The import into RGW is timed too (lines per second).
Throughput is memories per second: the corpus's rows over the wall time of the whole sweep. The machine is
shared and has 2 cores: with 2 workers the two runs share them with the daemon, the RGW and whatever else runs,
so the 1-to-2 ratio says how much of a run waits on the object store, not how a cluster of separate hosts scales.
The uptime load is printed first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "assets"))  # the helpers that run Dagster's processes

from bench_many_agents import corpus_lines  # noqa: E402
from results import Results  # noqa: E402

from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402

JOB = "full_pipeline_shard_job"
BIN = Path(sys.executable).parent
DEPLOY = ROOT / "deploy"
INSTANCE_VARIABLES = ("ENGRAM_PG_", "ENGRAM_CELERY_", "ENGRAM_MAX_", "ENGRAM_HEARTBEAT_")  # deploy/dagster.yaml's


def local_sweep(lines: list[dict[str, Any]], shards: int, work: Path) -> tuple[float, int]:
    """(a): the shard job over every shard in this process, on a local store; (seconds, rows)."""
    from dagster import DagsterInstance

    from assets.definitions import defs
    from assets.resources import EngramStore, RunScopedIOManager

    uri = str(work / "local")
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(shards)})
    rows = import_jsonl(MemoryStore.open(uri, settings=settings), lines, checks="exact").created
    job = defs.resolve_job_def(JOB)
    resources = {
        "engram": EngramStore(uri=uri, embedder="hashing"),
        "run_scoped_io_manager": RunScopedIOManager(base_dir=str(work / "io")),
    }
    began = time.perf_counter()
    with DagsterInstance.ephemeral() as instance:
        for shard in range(shards):
            assert job.execute_in_process(instance=instance, partition_key=str(shard), resources=resources).success
    return time.perf_counter() - began, rows


def distributed_sweep(
    cluster: Any, lines: list[dict[str, Any]], shards: int, workers: int, work: Path
) -> dict[str, Any]:
    """(b) with ``workers`` Celery workers: the import into RGW, then one backfill over every shard."""
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
    from dagster_procs import dagster_processes, wait_for

    from deploy.local_cluster import terminate

    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    env_vars = {**cluster.env(prefix), "ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(shards)}
    env_vars["ENGRAM_MAX_CONCURRENT_RUNS"] = str(workers)
    env_vars["ENGRAM_HOME"] = str(work / f"home-{workers}")
    settings = Settings.from_env(env_vars)
    began = time.perf_counter()
    rows = import_jsonl(MemoryStore.open(settings.resolved_db_uri, settings=settings), lines, checks="exact").created
    import_s = time.perf_counter() - began

    home = work / f"dagster-{workers}"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, **env_vars, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env["DAGSTER_DISABLE_TELEMETRY"] = "1"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # dagster-celery runs `celery` from the PATH
    workspace = ["-w", str(DEPLOY / "workspace.yaml")]
    for name in [k for k in env_vars if k.startswith(INSTANCE_VARIABLES)]:
        os.environ[name] = env_vars[name]  # this process reads the instance too
    instance = DagsterInstance.from_config(str(home))
    names = [f"bench-w{n + 1}-{prefix}" for n in range(workers)]
    with dagster_processes(env, webserver=False, workspace=workspace) as procs:
        pidfiles = {}
        for name in names:
            pidfiles[name] = procs.logs / f"{name}.pid"
            procs.start(
                name,
                [str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y",
                 str(DEPLOY / "celery.yaml"), "--name", name, "--", "--pool=solo", f"--pidfile={pidfiles[name]}"],
            )  # fmt: skip
        wait_for(
            lambda: all(" ready." in procs.log_tail(n, 200) for n in names),
            timeout=180, what="the Celery workers ready", procs=procs,
        )  # fmt: skip
        pids = [int(pidfiles[n].read_text()) for n in names]
        try:
            submitted = datetime.now(UTC)
            began = time.perf_counter()
            launched = subprocess.run(
                [str(BIN / "dagster"), "job", "backfill", "-j", JOB, *workspace,
                 "--partitions", ",".join(map(str, range(shards))), "--noprompt"],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]

            def finished() -> list[Any]:
                runs = instance.get_runs(RunsFilter(job_name=JOB, created_after=submitted))
                bad = [r.run_id for r in runs if r.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)]
                assert not bad, (bad, [procs.log_tail(n) for n in names])
                done = [r for r in runs if r.status == DagsterRunStatus.SUCCESS]
                return done if len(done) == shards else []

            wait_for(finished, timeout=3600, interval=2, what=f"{shards} successful runs", procs=procs)
            wall = time.perf_counter() - began
            records = instance.get_run_records(RunsFilter(job_name=JOB, created_after=submitted))
            durations = sorted(round(r.end_time - r.start_time, 1) for r in records if r.start_time and r.end_time)
        finally:
            for pid in pids:
                terminate(pid, grace=20)
    instance.dispose()
    return {"rows": rows, "import_s": import_s, "wall_s": wall, "run_s": durations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--memories", type=int, default=50, help="memories per agent")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Celery worker counts to measure")
    args = parser.parse_args()
    # The shard partitions (assets/partitions.py, read when the code location loads) and the resource's settings
    # come from the environment, in this process as in the workers.
    os.environ["ENGRAM_SHARDS"] = str(args.shards)
    print(f"load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}", flush=True)
    now = datetime.now(UTC)
    lines = corpus_lines([f"agent-{n:04d}" for n in range(args.agents)], args.memories, now)
    results = Results("distributed", args)
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        work = Path(tmp)
        local_s, rows = local_sweep(lines, args.shards, work)
        print(f"local: {rows:,} memories in {local_s:.1f} s = {rows / local_s:.1f} memories/s", flush=True)
        results.add("local", rows=rows, wall_s=round(local_s, 1))

        from deploy.local_cluster import Cluster

        cluster = Cluster(work / "cluster").start()
        print(f"cluster up: {cluster.timings} s", flush=True)
        try:
            for workers in args.workers:
                r = distributed_sweep(cluster, lines, args.shards, workers, work)
                print(
                    f"distributed, {workers} worker(s): import {r['rows'] / r['import_s']:.1f} lines/s; "
                    f"{r['rows']:,} memories in {r['wall_s']:.1f} s = {r['rows'] / r['wall_s']:.1f} memories/s "
                    f"({local_s / r['wall_s']:.2f}x local's rate); runs {r['run_s']} s",
                    flush=True,
                )
                results.add(f"distributed_{workers}_workers", rows=r["rows"], wall_s=round(r["wall_s"], 1),
                            import_s=round(r["import_s"], 1), run_s=r["run_s"])  # fmt: skip
        finally:
            cluster.stop()
    results.save()


if __name__ == "__main__":
    main()
