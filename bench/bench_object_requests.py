"""Object-store requests of an import and of a shard pass, counted by operation, and their time (issue 38).

    python bench/bench_object_requests.py                       # 16 agents x 50 memories, 4 shards, own cluster
    python bench/bench_object_requests.py --cluster-dir DIR     # a running `make cluster` (CLUSTER_DIR) instead
    python bench/bench_object_requests.py --checks remember     # the CLI's default import (semantic checks)

The same corpus (``bench_many_agents.corpus_lines``, hashing embedder, ``--shards`` shards) goes three ways:

- **reference**: a local directory; the import, then ``full_pipeline_shard_job``'s work on shard 0
  (``sweep(store, "pipeline", agents_in_shard(0))``) twice (the second finds nothing to do), timed;
- **timed on RGW**: the same on a store on the Ceph RGW, timed; printed as seconds and as the ratio to the
  reference measured in this run;
- **counted on RGW**: the same again on another store through a counting proxy (``bench/s3_counter.py``):
  requests by operation (GET, HEAD, PUT, LIST, ...) per step, per 1,000 imported lines, and the tables and
  table parts (manifest, transaction, data, index) that took the most.

The proxy adds a little latency of its own, so times come from the run without it. Opening the store (which
creates its tables the first time) is counted apart from the import. The load is printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_many_agents import corpus_lines  # noqa: E402
from results import Results  # noqa: E402
from s3_counter import CountingProxy  # noqa: E402

from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.lifecycle.sweep import sweep  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402

STEPS = ("open", "import", "reopen", "pass", "pass again")


def steps(uri: str, options: dict[str, str] | None, lines: list[dict[str, Any]], args: argparse.Namespace,
          after: Callable[[str, float], None]) -> int:  # fmt: skip
    """Open, import, reopen, two shard passes on shard 0; ``after(step, seconds)`` after each. Returns rows."""
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(args.shards)})
    began = time.perf_counter()
    store = MemoryStore.open(uri, settings=settings, storage_options=options)
    after("open", time.perf_counter() - began)
    began = time.perf_counter()
    rows = import_jsonl(store, lines, checks=args.checks).created
    after("import", time.perf_counter() - began)
    began = time.perf_counter()
    store = MemoryStore.open(uri, settings=settings, storage_options=options)  # what a new process pays
    after("reopen", time.perf_counter() - began)
    for step, run in (("pass", "r1"), ("pass again", "r2")):
        began = time.perf_counter()
        sweep(store, "pipeline", store.engine.agents_in_shard(0), run_id=run)
        after(step, time.perf_counter() - began)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--memories", type=int, default=50, help="memories per agent")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--checks", choices=("exact", "remember"), default="exact", help="the import's checks")
    parser.add_argument("--cluster-dir", type=Path, help="a running local cluster's directory (else start one)")
    parser.add_argument("--top", type=int, default=8, help="table parts to list per step")
    args = parser.parse_args()
    print(f"load: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    lines = corpus_lines([f"agent-{n:04d}" for n in range(args.agents)], args.memories, datetime.now(UTC))
    results = Results("object_requests", args)

    from deploy.local_cluster import Cluster

    with tempfile.TemporaryDirectory(prefix="bench-requests-") as tmp:
        reference: dict[str, float] = {}
        rows = steps(str(Path(tmp) / "local"), None, lines, args, lambda s, t: reference.__setitem__(s, t))
        cluster = Cluster.load(args.cluster_dir) if args.cluster_dir else Cluster(Path(tmp) / "cluster").start()
        try:
            options = cluster.storage_options
            timed: dict[str, float] = {}
            steps(f"s3://engram/bench-{uuid.uuid4().hex[:8]}", options, lines, args, timed.__setitem__)
            counted: dict[str, dict[str, Any]] = {}
            with CountingProxy(options["aws_endpoint"]) as proxy:
                proxy_options = {**options, "aws_endpoint": proxy.endpoint}
                proxy.take()
                steps(f"s3://engram/bench-{uuid.uuid4().hex[:8]}", proxy_options, lines, args,
                      lambda s, t: counted.__setitem__(s, proxy.take()))  # fmt: skip
        finally:
            if not args.cluster_dir:
                cluster.stop()

    print(f"{rows:,} lines imported ({args.agents} agents x {args.memories}, {args.shards} shards, "
          f"checks={args.checks}); shard 0's pass over its agents", flush=True)  # fmt: skip
    print(f"{'step':<11} {'local s':>8} {'RGW s':>8} {'RGW/local':>9} {'requests':>9}  by operation")
    for step in STEPS:
        c = counted[step]
        ops = " ".join(f"{op} {n}" for op, n in sorted(c["ops"].items(), key=lambda kv: -kv[1]))
        ratio = timed[step] / reference[step] if reference[step] else float("nan")
        print(f"{step:<11} {reference[step]:>8.2f} {timed[step]:>8.2f} {ratio:>8.1f}x {c['total']:>9}  {ops}")
        results.add(step.replace(" ", "_"), local_s=round(reference[step], 2), rgw_s=round(timed[step], 2),
                    requests=c["total"], ops=c["ops"])  # fmt: skip
    per = counted["import"]["total"] / rows * 1000 if rows else 0.0
    print(f"import: {per:.0f} requests per 1,000 lines; {rows / timed['import']:.0f} lines/s on RGW, "
          f"{rows / reference['import']:.0f} lines/s locally")  # fmt: skip
    results.add("import_rates", requests_per_1000_lines=round(per, 1),
                rgw_lines_per_s=round(rows / timed["import"], 1),
                local_lines_per_s=round(rows / reference["import"], 1))  # fmt: skip
    for step in STEPS:
        top = sorted(counted[step]["parts"].items(), key=lambda kv: -kv[1])[: args.top]
        print(f"  {step}: " + ", ".join(f"{op} {table}/{part} {n}" for (op, table, part), n in top))
    print(json.dumps({s: counted[s]["seconds"] for s in STEPS}), "(upstream seconds by operation, counted run)")
    results.save()


if __name__ == "__main__":
    main()
