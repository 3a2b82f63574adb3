"""Benchmark the corpus merge plan and the health report as shard sweeps against the same work agent by agent.

    python bench/bench_plan_sweep.py                      # 200 agents x 50 memories, a fifth in near-duplicates
    python bench/bench_plan_sweep.py --agents 1000 --memories 100

Data: ``--agents`` agents of ``--memories`` rows (hand-made unit vectors, so the clusters are known): a fifth of
each agent's rows are rephrasings of another row at cosine 0.9-0.95 (the merge band), the rest unrelated;
inserted in one bulk write into a store of one shard on a temporary directory.

Measured in one run, on two copies of the same store at one ``now``:
(a) the sweep: ``plan_sweep(store, agents)`` then ``health_sweep(store, agents)``;
(b) the reference: ``consolidate_corpus(store, agent)`` then ``health(store, agent)`` for each agent in turn.
Each twice: the first run stores every agent's plan, the second finds them stored (the daily case for an agent
whose rows did not change). Wall time and commits (``store.engine.table_versions()`` before and after). The reports
of (a) and (b) are checked equal (plan ids and cursors aside). The machine is shared: the ``uptime`` load is
printed first; compare the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from results import Results  # noqa: E402

from engram_pipeline.lifecycle.corpus_merge import consolidate_corpus, plan_sweep  # noqa: E402
from engram_pipeline.lifecycle.health import health, health_sweep  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
VARYING = ("cursor", "plan_id", "expired")  # what differs between two stores' runs of the same work


def open_store(uri: str) -> MemoryStore:
    return MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": "1"}))


def build(uri: str, agents: list[str], memories: int) -> None:
    store = open_store(uri)
    dim = store.embedder.dimension
    rng = np.random.default_rng(0)
    rows = []
    for agent in agents:
        base, said = np.zeros(dim), ""
        for i in range(memories):
            if i % 5 == 4:  # a rephrasing of the row before, in the merge band
                cosine = rng.uniform(0.9, 0.95)
                noise = rng.normal(size=dim)
                noise -= (noise @ base) * base
                vector = cosine * base + np.sqrt(1 - cosine**2) * noise / np.linalg.norm(noise)
                content = f"{said}, as noted"
            else:
                base = rng.normal(size=dim)
                base /= np.linalg.norm(base)
                vector, said = base, f"fact {i} of {agent}: the build of service {i} runs at {i % 24} o'clock"
                content = said
            row = store.engine.new_row(agent, content, created_at=NOW - timedelta(days=1 + i % 30))
            row["vector"] = [float(x) for x in vector]
            rows.append(row)
    store.engine.insert_rows(rows)


def commits(store: MemoryStore, run: Callable[[], Any]) -> tuple[float, int, Any]:
    before = store.engine.table_versions()
    start = time.perf_counter()
    out = run()
    seconds = time.perf_counter() - start
    after = store.engine.table_versions()
    return seconds, sum(after[name] - before.get(name, 0) for name in after), out


def strip(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list | tuple):
        return [strip(v) for v in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--memories", type=int, default=50)
    args = parser.parse_args()
    results = Results("plan_sweep", args)
    print(f"load: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; 1 shard; hashing embedder")
    agents = [f"agent-{n:05d}" for n in range(args.agents)]
    with tempfile.TemporaryDirectory(prefix="bench_plan_sweep_") as tmp:
        base = str(Path(tmp) / "base")
        build(base, agents, args.memories)
        swept_uri, looped_uri = str(Path(tmp) / "swept"), str(Path(tmp) / "looped")
        shutil.copytree(base, swept_uri)
        shutil.copytree(base, looped_uri)
        swept, looped = open_store(swept_uri), open_store(looped_uri)

        def sweep_both() -> Any:
            return plan_sweep(swept, agents, now=NOW), health_sweep(swept, agents, now=NOW)

        def loop_both() -> Any:
            plans = {a: consolidate_corpus(looped, a, now=NOW) for a in agents}
            return plans, {a: health(looped, a, now=NOW) for a in agents}

        print(
            f"{args.agents} agents x {args.memories} memories\n"
            f"{'run':<14} {'sweep ms/agent':>15} {'commits':>8} {'loop ms/agent':>14} {'commits':>8} {'loop/sweep':>11}"
        )
        for run in ("first", "plans stored"):
            s_seconds, s_commits, got = commits(swept, sweep_both)
            l_seconds, l_commits, want = commits(looped, loop_both)
            assert strip(got) == strip(want), "the sweep's reports differ from the per-agent ones"
            n = len(agents)
            print(
                f"{run:<14} {s_seconds / n * 1000:>15.1f} {s_commits:>8} {l_seconds / n * 1000:>14.1f} "
                f"{l_commits:>8} {l_seconds / s_seconds:>10.1f}x"
            )
            results.add(
                "runs",
                run=run,
                agents=n,
                memories=args.memories,
                sweep_ms_per_agent=s_seconds / n * 1000,
                sweep_commits=s_commits,
                loop_ms_per_agent=l_seconds / n * 1000,
                loop_commits=l_commits,
                loop_over_sweep=l_seconds / s_seconds,
            )
        clusters = sum(r.clusters for r in got[0].values())
        planned = sum(r.plan_id is not None for r in got[0].values())
        print(f"clusters planned: {clusters} over {planned} agents")
        results.add("clusters_planned", clusters=clusters, agents=planned)
    results.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
