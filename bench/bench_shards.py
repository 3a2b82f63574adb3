"""Benchmark the sharded store: commits per second of 4 writer processes on agents of different shards, and the
cost of opening a store, at ``ENGRAM_SHARDS`` 1, 2, 4 and 8 on a local directory.

    python bench/bench_shards.py                    # 4 writers, 20 s per shard count
    python bench/bench_shards.py --seconds 8        # quick

Each writer repeats a one-row compare-and-set (``cas_write``: one commit to ``memories``) on its own agent's row
for ``--seconds``. The agents are picked so that at N shards they spread over min(4, N) shards; at 1 shard all
four commit to one table, as every store did before sharding. Opening is ``MemoryStore.open`` of an existing
store (every table is opened by name: 6 per shard). Every figure is printed beside the 1-shard one measured in
the same run (the machine is shared: the ``uptime`` load is printed; compare ratios, not absolutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import Results  # noqa: E402

from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402
from engram_pipeline.store.sharding import shard_of  # noqa: E402


def settings(shards: int) -> Settings:
    return Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(shards)})


def spread_agents(shards: int, writers: int) -> list[str]:
    """``writers`` agent ids covering as many distinct shards as there are (round robin over shards)."""
    by: dict[int, list[str]] = {}
    n = 0
    while sum(len(v) for v in by.values()) < 64 * writers:
        agent = f"agent-{n}"
        by.setdefault(shard_of(agent, shards), []).append(agent)
        n += 1
    return [by[i % shards][i // shards] for i in range(writers)]


def worker(uri: str, agent: str, shards: int, seconds: float, go: str) -> None:
    store = MemoryStore.open(uri, settings=settings(shards))
    row = store.list_memories(agent)[0]
    version, commits, conflicts = int(row["version"]), 0, 0
    while not os.path.exists(go):
        time.sleep(0.01)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        result = store.engine.cas_write(
            [{"id": row["id"], "version": version, "importance": (commits % 100) / 100}], actor="bench", action="bench"
        )
        commits += result.commits
        if result.applied:
            version += 1
        else:
            conflicts += 1
            version = int(store.get(row["id"], track_access=False)["version"])
    print(
        json.dumps({"agent": agent, "shard": store.engine.shard_of(agent), "commits": commits, "conflicts": conflicts})
    )


def run_writers(uri: str, shards: int, writers: int, seconds: float) -> dict:
    agents = spread_agents(shards, writers)
    store = MemoryStore.open(uri, settings=settings(shards))
    for agent in agents:
        store.remember(agent, f"{agent} has one row to update")
    go = os.path.join(uri, "..", f"go-{shards}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", uri, agent, str(shards), str(seconds), go],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for agent in agents
    ]
    time.sleep(4.0)  # every worker has opened the store and waits for the go file
    Path(go).touch()
    outs = [json.loads(p.communicate(timeout=seconds + 120)[0]) for p in procs]
    commits = sum(o["commits"] for o in outs)
    return {
        "shards": shards,
        "tables_written": len({o["shard"] for o in outs}),
        "commits": commits,
        "commits_per_s": commits / seconds,
        "conflicts": sum(o["conflicts"] for o in outs),
        "tables": len(store.engine.tables()),
    }


def open_cost(uri: str, shards: int, repeats: int) -> float:
    MemoryStore.open(uri, settings=settings(shards))  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        MemoryStore.open(uri, settings=settings(shards))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", nargs=5, metavar=("URI", "AGENT", "SHARDS", "SECONDS", "GO"))
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--opens", type=int, default=10)
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4, 8])
    args = ap.parse_args()
    if args.worker:
        uri, agent, shards, seconds, go = args.worker
        worker(uri, agent, int(shards), float(seconds), go)
        return
    results = Results("shards", args)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"cores: {os.cpu_count()}; writers: {args.writers}; {args.seconds:.0f} s per shard count\n")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for shards in args.shards:
            uri = os.path.join(tmp, f"store-{shards}")
            r = run_writers(uri, shards, args.writers, args.seconds)
            r["open_ms"] = open_cost(uri, shards, args.opens)
            runs.append(r)
    ref = runs[0]
    print(
        f"{'shards':>6} {'tables':>6} {'written':>7} {'commits/s':>10} {'x 1 shard':>9} {'open ms':>8} {'x 1 shard':>9}"
    )
    for r in runs:
        print(
            f"{r['shards']:>6} {r['tables']:>6} {r['tables_written']:>7} {r['commits_per_s']:>10.1f} "
            f"{r['commits_per_s'] / ref['commits_per_s']:>9.2f} {r['open_ms']:>8.1f} "
            f"{r['open_ms'] / ref['open_ms']:>9.2f}"
        )
        results.add(
            "shards",
            **r,
            commits_per_s_x_1_shard=r["commits_per_s"] / ref["commits_per_s"],
            open_ms_x_1_shard=r["open_ms"] / ref["open_ms"],
        )
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(json.dumps(runs))
    results.save()


if __name__ == "__main__":
    main()
