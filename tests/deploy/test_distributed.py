"""The distributed profile end to end: Dagster on Postgres, runs on two Celery workers, the store on Ceph RGW.

Everything runs on 127.0.0.1 from ``deploy/``: the local cluster (``deploy/local_cluster.py``: Postgres, Redis,
Ceph RGW), the instance of ``deploy/dagster.yaml``, a ``dagster-daemon`` and two ``dagster-celery`` workers. The
test backfills ``full_pipeline_job`` over the sample corpus's four agents through the daemon and checks that

- every run succeeded, and each one executed in a Celery worker process (the PIDs of its step events are the
  workers' PIDs; both workers took runs, the daemon none);
- the store on S3 ends equal, row for row, to an in-process run of the same job over a local copy of the same
  input (time-dependent columns aside: the passes read the wall clock);

then stops everything it started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deploy.local_cluster import Cluster, terminate
from engram_pipeline.importer import import_jsonl
from engram_pipeline.sample import load_sample_corpus
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.assets.dagster_procs import DagsterProcs, dagster_processes, wait_for
from tests.assets.test_pass_metrics import read_textfiles

pytestmark = [pytest.mark.distributed, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
JOB = "full_pipeline_job"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # the corpus's clock: both stores get identical input
WORKERS = ("engram-w1", "engram-w2")
INSTANCE_VARIABLES = ("ENGRAM_PG_", "ENGRAM_CELERY_", "ENGRAM_MAX_", "ENGRAM_HEARTBEAT_")  # deploy/dagster.yaml's
# compared row for row; the rest (timestamps, scores with a recency term, metadata with run ids) reads the clock
STABLE = ["agent_id", "tier", "kind", "content", "source", "outcome", "status", "pinned", "tags", "version"]
STABLE += ["access_count", "reinforcement_count"]


def seed(store: MemoryStore) -> tuple[list[str], int]:
    """The sample corpus imported as `engram import` does; its agents and how many rows were created."""
    lines = load_sample_corpus(NOW)
    report = import_jsonl(store, lines)
    assert report.created and not report.errors, report
    return sorted({line["agent_id"] for line in lines}), report.created


CONFIDENCE_TOLERANCE = 0.005  # far above the minutes of decay between the runs (the test prints the largest)


def snapshot(store: MemoryStore) -> dict[str, Any]:
    """The store's content with ids replaced by content (derived rows get fresh ids in each run)."""
    rows = store.engine.memories.search().limit(None).to_arrow().to_pylist()
    key = {r["id"]: (r["agent_id"], r["kind"], r["content"]) for r in rows}
    # Each row as JSON, with its confidence beside it: the confidence decays with the time the pass ran at,
    # which differs between the two stores by the minutes between their runs, so it is compared within
    # CONFIDENCE_TOLERANCE (rounded to 3 places, it crossed a rounding boundary once: 0.203 against 0.202).
    memories = sorted(
        (
            json.dumps(
                {
                    **{c: r[c] for c in STABLE},
                    "superseded_by": key.get(r["superseded_by"], r["superseded_by"]),
                    "contradiction_with": sorted(str(key.get(i, i)) for i in r["contradiction_with"] or []),
                },
                sort_keys=True,
                default=str,
            ),
            float(r["confidence"]),
        )
        for r in rows
    )
    links = Counter(
        (str(key.get(link["src_id"])), str(key.get(link["dst_id"])), link["rel"])
        for link in store.engine.links.table.search().limit(None).to_arrow().to_pylist()
    )
    audit = Counter(
        (str(key.get(a["memory_id"], a["memory_id"])), a["action"], a["actor"])
        for a in store.engine.audit.table.search().limit(None).to_arrow().to_pylist()
    )
    return {"memories": memories, "links": links, "audit": audit}


def start_worker(procs: DagsterProcs, name: str) -> Path:
    """A ``dagster-celery`` worker taking one run at a time in its own process (solo pool); returns its pidfile."""
    pidfile = procs.logs / f"{name}.pid"
    procs.start(
        name,
        [str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y", str(DEPLOY / "celery.yaml"),
         "--name", name, "--", "--pool=solo", f"--pidfile={pidfile}"],
    )  # fmt: skip
    return pidfile


def run_pipeline(
    procs: DagsterProcs, instance: Any, env: dict[str, str], workspace: list[str], agents: list[str]
) -> tuple[list[Any], dict[str, set[int]], list[float]]:
    """Backfill the job over ``agents`` through the daemon; the runs, the PIDs of each run's step events (by
    agent) and the run durations."""
    from dagster import DagsterRunStatus, RunsFilter

    launched = subprocess.run(
        [str(BIN / "dagster"), "job", "backfill", "-j", JOB, *workspace, "--partitions", ",".join(agents),
         "--noprompt"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]

    def finished() -> list[Any]:
        runs = instance.get_runs(RunsFilter(job_name=JOB))
        failed = [r for r in runs if r.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)]
        assert not failed, [(r.run_id, r.status, procs.log_tail(w)) for r in failed for w in WORKERS]
        done = [r for r in runs if r.status == DagsterRunStatus.SUCCESS]
        return done if len(done) == len(agents) else []

    runs = wait_for(finished, timeout=600, interval=2, what=f"{len(agents)} successful runs", procs=procs)
    pids_by_run = {
        run.tags["dagster/partition"]: {
            e.dagster_event.pid
            for e in instance.all_logs(run.run_id)
            if e.dagster_event and e.dagster_event.is_step_event
        }
        for run in runs
    }
    durations = [
        record.end_time - record.start_time
        for record in instance.get_run_records(RunsFilter(job_name=JOB))
        if record.start_time and record.end_time
    ]
    return runs, pids_by_run, durations


def test_the_pipeline_runs_on_celery_workers_and_matches_an_in_process_run(
    cluster: Cluster, cluster_env: dict[str, str], s3_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    settings = Settings.from_env(cluster_env)
    agents, created = seed(MemoryStore.open(s3_uri, settings=settings))
    reference_uri = str(tmp_path / "reference")
    assert seed(MemoryStore.open(reference_uri, settings=settings, storage_options={})) == (agents, created)

    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, **cluster_env, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env["DAGSTER_DISABLE_TELEMETRY"] = "1"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # dagster-celery runs `celery` from the PATH
    env["ENGRAM_METRICS_DIR"] = str(tmp_path / "metrics")  # what a node_exporter beside the workers would serve
    workspace = ["-w", str(DEPLOY / "workspace.yaml")]

    from dagster import DagsterInstance

    for name in [k for k in cluster_env if k.startswith(INSTANCE_VARIABLES)]:
        monkeypatch.setenv(name, cluster_env[name])  # this process reads the instance too

    instance = DagsterInstance.from_config(str(home))
    instance.add_dynamic_partitions("agents", agents)
    with dagster_processes(env, webserver=False, workspace=workspace) as procs:
        pidfiles = {name: start_worker(procs, name) for name in WORKERS}
        wait_for(
            lambda: all(f"{name}@" in procs.log_tail(name, 200) and " ready." in procs.log_tail(name, 200)
                        for name in WORKERS),
            timeout=120, what="both Celery workers ready", procs=procs,
        )  # fmt: skip
        worker_pids = {name: int(pidfiles[name].read_text()) for name in WORKERS}
        try:
            runs, pids_by_run, durations = run_pipeline(procs, instance, env, workspace, agents)
        finally:
            # The celery process is the CLI's child: stopping the CLI's session does not always end it.
            for pid in worker_pids.values():
                terminate(pid, grace=20)
    instance.dispose()

    ran_on = {agent: {n for n, pid in worker_pids.items() if pid in pids} for agent, pids in pids_by_run.items()}
    print(f"\nruns per worker: {ran_on}; run durations {sorted(round(d, 1) for d in durations)} s")
    assert sorted(pids_by_run) == agents
    assert all(pids and pids <= set(worker_pids.values()) for pids in pids_by_run.values()), (pids_by_run, worker_pids)
    assert set().union(*ran_on.values()) == set(WORKERS), ran_on  # both workers took runs
    # The workers wrote every pass's metrics for Prometheus, the health run's visible rows among them.
    scraped = read_textfiles(tmp_path / "metrics")
    assert {("memory_health", a) for a in agents} | {("importance_decay", a) for a in agents} <= set(scraped)
    assert all(scraped["memory_health", a]["engram_rows_visible"] > 0 for a in agents), scraped

    from assets.definitions import defs
    from assets.resources import EngramStore, RunScopedIOManager

    job = defs.resolve_job_def(JOB)
    resources = {
        "engram": EngramStore(uri=reference_uri, embedder="hashing"),
        "run_scoped_io_manager": RunScopedIOManager(base_dir=str(tmp_path / "io")),
    }
    with DagsterInstance.ephemeral() as scratch:
        scratch.add_dynamic_partitions("agents", agents)
        for agent in agents:
            assert job.execute_in_process(instance=scratch, partition_key=agent, resources=resources).success

    distributed = snapshot(MemoryStore.open(s3_uri, settings=settings))
    reference = snapshot(MemoryStore.open(reference_uri, settings=settings, storage_options={}))
    assert [row for row, _ in distributed["memories"]] == [row for row, _ in reference["memories"]]
    for (row, ours), (_, theirs) in zip(distributed["memories"], reference["memories"], strict=True):
        assert abs(ours - theirs) <= CONFIDENCE_TOLERANCE, (row, ours, theirs)
    drift = max(abs(a - b) for (_, a), (_, b) in zip(distributed["memories"], reference["memories"], strict=True))
    print(f"largest confidence difference between the two stores: {drift:.2e}")
    assert distributed["links"] == reference["links"]
    assert distributed["audit"] == reference["audit"]
    print(f"distributed test: {time.monotonic() - began:.0f} s after the cluster was up ({cluster.timings} s)")
