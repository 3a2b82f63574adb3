"""Benchmark the columnar sweeps against the per-agent loop they replace, for the passes that have one.

    python bench/bench_sweep.py                        # 1,000 agents x 100 memories: sweeps 3 times, loops once
                                                       # (the loops take 10-40 minutes on a shared 2-core machine)
    python bench/bench_sweep.py --agents 200 --repeats 1 --loop-repeats 1

Data: ``--agents`` agents of ``--memories`` memories each (hashing embedder), inserted in bulk
(``ShardedEngine.insert_rows``, one commit per 20,000 rows). Per agent, in tenths: short-term rows that earned
promotion, short-term rows past their TTL, short-term rows an LTM row already holds (same vector; the LTM row
is one of the agent's memories), LTM rows untouched for 60 days (prunable under the ``seed`` retention policy,
which the benchmark uses so that decay prunes), and recent LTM rows: every kind of write both passes make.

For each pass (``stm_promotion``, ``ltm_decay``), on fresh copies of the built store at one ``now``:
(a) ``sweep(store, pass, agents)`` (one columnar run per shard), ``--repeats`` times, (b) the reference: the
per-agent function for every agent in turn, ``--loop-repeats`` times (it takes about half a second per agent
here, so by default once). Printed per pass: the median wall time of each, the ratio, and the commits each made
(table versions created, all tables, and of ``memories``), and a check that both left the same rows.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from results import Results  # noqa: E402

from engram_pipeline.lifecycle.decay import decay_importance  # noqa: E402
from engram_pipeline.lifecycle.promotion import promote_stm  # noqa: E402
from engram_pipeline.lifecycle.sweep import sweep  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
PER_AGENT: dict[str, Callable[..., Any]] = {"stm_promotion": promote_stm, "ltm_decay": decay_importance}
ENV = {"ENGRAM_EMBEDDER": "hashing", "ENGRAM_RETENTION_POLICY": "seed"}


def open_store(uri: str) -> MemoryStore:
    return MemoryStore.open(uri, settings=Settings.from_env(ENV))


def build(uri: str, agents: int, memories: int) -> list[str]:
    store = open_store(uri)
    names = [f"agent-{a:05d}" for a in range(agents)]
    rows: list[dict[str, Any]] = []
    recent = NOW - timedelta(minutes=5)
    for agent in names:
        holder: dict[str, Any] | None = None
        for i in range(memories):
            kind = i % 10
            if kind == 0:
                row = store.engine.new_row(
                    agent,
                    f"We decided to deploy service {i} of {agent} on Fridays",
                    tier="stm",
                    access_count=5,
                    last_accessed_at=recent,
                    created_at=NOW - timedelta(hours=2),
                )
            elif kind == 1:
                row = store.engine.new_row(
                    agent, f"scratch note {i} of {agent}", tier="stm", created_at=NOW - timedelta(hours=30)
                )
                row["expires_at"] = NOW - timedelta(hours=6)
            elif kind == 2:
                holder = store.engine.new_row(agent, f"We decided to keep release train {i} of {agent}", tier="ltm")
                row = holder
            elif kind == 3 and holder is not None:
                row = store.engine.new_row(
                    agent,
                    f"We decided to keep release train {i - 1} of {agent} again",
                    tier="stm",
                    access_count=5,
                    last_accessed_at=recent,
                    created_at=NOW - timedelta(hours=2),
                )
                row["vector"] = holder["vector"]
            elif kind < 7:
                row = store.engine.new_row(
                    agent,
                    f"old remark {i} of {agent}",
                    tier="ltm",
                    pinned=i % 20 == 5,
                    created_at=NOW - timedelta(days=60),
                )
                row["last_accessed_at"] = NOW - timedelta(days=60)
            else:
                row = store.engine.new_row(
                    agent,
                    f"the printer {i} of {agent} is on floor two",
                    tier="ltm",
                    access_count=1,
                    created_at=NOW - timedelta(days=2),
                )
            if row.get("vector") is None:
                row["vector"] = store.engine.embed([row["content"]])[0].tolist()
            rows.append(row)
    for start in range(0, len(rows), 20_000):
        store.engine.insert_rows(rows[start : start + 20_000])
    return names  # fmt: skip


def commits(store: MemoryStore, run: Callable[[], Any]) -> tuple[float, dict[str, int]]:
    before = store.engine.table_versions()
    t = time.perf_counter()
    run()
    wall = time.perf_counter() - t
    after = store.engine.table_versions()
    return wall, {name: after[name] - before[name] for name in before}


def loop(per_agent: Callable[..., Any], store: MemoryStore, agents: list[str]) -> None:
    for agent in agents:
        per_agent(store, agent, now=NOW)


def state(store: MemoryStore, agents: list[str]) -> list[tuple[Any, ...]]:
    cols = ["id", "version", "tier", "status", "importance", "superseded_by", "expires_at"]
    table = store.engine.scan_agents(agents, columns=cols).sort_by("id")
    return list(zip(*(table[c].to_pylist() for c in cols), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--memories", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loop-repeats", type=int, default=1)
    parser.add_argument("--passes", nargs="+", choices=list(PER_AGENT), default=list(PER_AGENT))
    args = parser.parse_args()
    results = Results("sweep", args)
    root = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    try:
        t = time.perf_counter()
        agents = build(str(root / "base"), args.agents, args.memories)
        rows = args.agents * args.memories
        built = time.perf_counter() - t
        print(f"built {args.agents} agents x {args.memories} memories ({rows} rows) in {built:.0f} s")
        results.add("build", agents=args.agents, memories=args.memories, rows=rows, seconds=built)
        for name in args.passes:
            per_agent = PER_AGENT[name]
            swept: list[tuple[float, dict[str, int]]] = []
            looped: list[tuple[float, dict[str, int]]] = []
            end_state = None
            for n in range(max(args.repeats, args.loop_repeats)):
                for kind, runs in (("sweep", swept), ("loop", looped)):
                    if len(runs) == (args.repeats if kind == "sweep" else args.loop_repeats):
                        continue
                    uri = str(root / f"{name}-{n}-{kind}")
                    shutil.copytree(root / "base", uri)
                    store = open_store(uri)
                    work = (
                        partial(sweep, store, name, agents, now=NOW)
                        if kind == "sweep"
                        else partial(loop, per_agent, store, agents)
                    )
                    runs.append(commits(store, work))
                    got = state(store, agents)
                    end_state = end_state or got
                    print(f"  {name} {kind} {len(runs)}: {runs[-1][0]:.1f} s, same rows: {got == end_state}")
                    assert got == end_state, "the sweep and the loop left different rows"
                    shutil.rmtree(uri)
            ts, tl = statistics.median(w for w, _ in swept), statistics.median(w for w, _ in looped)
            cs, cl = swept[0][1], looped[0][1]
            runs = f"medians of {len(swept)} and {len(looped)} runs"
            print(f"{name}: sweep {ts:.2f} s vs per-agent loop {tl:.2f} s ({runs}): {tl / ts:.1f}x;")
            print(f"  {rows / ts:,.0f} rows/s vs {rows / tl:,.0f} rows/s")
            print(f"  commits: sweep {sum(cs.values())} ({cs['memories']} of memories, {cs['cursors']} of cursors) vs "
                  f"loop {sum(cl.values())} ({cl['memories']} of memories, {cl['cursors']} of cursors): "
                  f"{sum(cl.values()) / max(1, sum(cs.values())):.0f}x fewer")  # fmt: skip
            results.add(
                "passes",
                name=name,
                sweep_median_s=ts,
                loop_median_s=tl,
                sweep_runs=len(swept),
                loop_runs=len(looped),
                loop_over_sweep=tl / ts,
                sweep_rows_per_s=rows / ts,
                loop_rows_per_s=rows / tl,
                sweep_commits=sum(cs.values()),
                sweep_memories_commits=cs["memories"],
                sweep_cursors_commits=cs["cursors"],
                loop_commits=sum(cl.values()),
                loop_memories_commits=cl["memories"],
                loop_cursors_commits=cl["cursors"],
                fewer_commits=sum(cl.values()) / max(1, sum(cs.values())),
            )
        results.save()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
