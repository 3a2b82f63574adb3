"""Run every benchmark, each as its own process, and print their reports one after another.

``python bench/run_all.py`` (what ``make bench`` runs) uses quick sizes that finish in minutes on 2 cores;
``--full`` uses the sizes the issues name (200k-vector graph, 1M-row decays, 100k recall latency, 20-agent
backfill, 100k-row write path, the pipeline over 1,000 and 10,000 agents), which take hours while the
pipeline sweeps one agent at a time. ``--only NAME`` runs one (the script
name without ``bench_``). Every script prints ratios against a reference it measures in the same run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

WRITE_PATH_QUICK = (
    "--large 10000 --single 100 --shared-writes 50 --http-writes 30 "
    "--bulk-rows 20000 --minilm-rows 200 --minilm-single 10"
)
# name -> (quick arguments, full arguments)
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    "neighbour_graph": (["--n", "30000", "--repeats", "1"], ["--n", "200000", "--lance-index"]),
    "decay": (["--rows", "100000", "--repeats", "1", "--ref-sample", "300"], ["--rows", "1000000"]),
    "confidence_decay": (
        ["--n", "200000", "--repeats", "1", "--store-rows", "20000"],
        ["--n", "1000000", "--store-rows", "100000"],
    ),
    "store": (
        [
            "--sizes",
            "10000",
            "--single-rows",
            "100",
            "--bulk-rows",
            "5000",
            "--minilm-rows",
            "100",
            "--minilm-single",
            "10",
        ],
        [],
    ),
    "write_path": ([*WRITE_PATH_QUICK.split(), "--fragment-writes", "500", "--queries", "50"], []),
    "recall_latency": (
        ["--memories", "20000", "--agents", "20"],
        ["--memories", "100000", "--agents", "100", "--minilm"],
    ),
    "merge_quality": (["--limit", "200"], ["--limit", "0"]),
    "merge_review": (["--n", "5000"], ["--n", "20000"]),
    "backfill": (["--agents", "4"], ["--agents", "20"]),
    "consolidation_quality": (["--episodes", "2000", "--repeats", "1"], ["--episodes", "10000"]),
    "decay_safety": (["--embedder", "hashing", "--agents", "3", "--sessions", "6", "--turns", "20"], []),
    "shards": (["--seconds", "8", "--opens", "5"], []),
    "many_agents": (["--quick"], ["--workers", "1", "2"]),
    "plan_sweep": (["--agents", "100", "--memories", "50"], ["--agents", "1000", "--memories", "100"]),
    "side_versions": (["--appends", "1000"], []),
    "convergence": (["--agents", "1", "--every", "7"], []),
    "startup": (["--repeats", "3"], ["--repeats", "5"]),
    "idle_commits": ([], []),
    "sweep": (["--agents", "100", "--memories", "50", "--repeats", "1"], []),
    "store_verbs": (["--rows", "2000", "--calls", "100", "--repeats", "1"], []),
    "merge_plan": (["--n", "10000"], []),
}
# Started by hand beside the local cluster (docs/deploy.md), so not run here: they need Postgres, Redis and Ceph.
NEEDS_CLUSTER = ("open_store", "object_requests", "distributed", "async_handles")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the sizes the issues name (slow)")
    parser.add_argument("--only", choices=sorted(BENCHES), action="append", help="run only these")
    args = parser.parse_args()
    failed = []
    for name, (quick, full) in BENCHES.items():
        if args.only and name not in args.only:
            continue
        cmd = [sys.executable, str(HERE / f"bench_{name}.py"), *(full if args.full else quick)]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        start = time.perf_counter()
        code = subprocess.call(cmd)
        print(f"=== {name}: exit {code} after {time.perf_counter() - start:.1f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
