"""Profile ``pipeline_sweep`` over one shard of N agents: seconds per stage per N, and the hot call sites.

    python bench/profile_sweep.py --agents 250 1000 2500 --store-dir /tmp/sweep_stores
    python bench/profile_sweep.py --agents 2500 --no-profile        # stage times only, no cProfile overhead

For each N a store of N agents x ``--memories`` memories (``bench_many_agents.corpus_lines``, one shard) is
built once under ``--store-dir`` and kept, so later runs reuse it; each run sweeps a fresh copy of it at the
same ``now`` the corpus was built for. Every stage of ``pipeline_sweep`` is timed with ``perf_counter``; the
table prints seconds per stage and ms per agent, so a stage whose cost per agent grows with N shows. With
cProfile on (the default), the top call sites by cumulative time are printed per N (``--top``). The machine is
shared: the load is printed; compare runs made back to back.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shutil
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_many_agents import build, corpus_lines, open_store  # noqa: E402

from engram_pipeline.lifecycle import pipeline  # noqa: E402
from engram_pipeline.model import utcnow  # noqa: E402

STAGES = (
    "promotion_sweep",
    "decay_sweep",
    "agent_graph",
    "confidence_sweep",
    "contradiction_sweep",
    "plan_sweep",
    "consolidation_sweep",
    "health_sweep",
)


def timed_stages(seconds: dict[str, float]) -> None:
    """Wrap each stage ``pipeline_sweep`` calls so its wall time lands in ``seconds``."""
    for name in STAGES:
        original: Callable[..., Any] = getattr(pipeline, name)
        original = getattr(original, "__wrapped__", original)

        def wrapper(*args: Any, _f: Callable[..., Any] = original, _n: str = name, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                seconds[_n] = seconds.get(_n, 0.0) + time.perf_counter() - start

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(pipeline, name, wrapper)


def pristine(base: Path, agents: int, memories: int) -> tuple[Path, datetime]:
    """The kept store of ``agents`` agents (built on first use) and the ``now`` its corpus was made for."""
    uri, meta = base / f"{agents}x{memories}", base / f"{agents}x{memories}.json"
    if not meta.exists():
        shutil.rmtree(uri, ignore_errors=True)
        now = utcnow()
        lines = corpus_lines([f"agent-{n:06d}" for n in range(agents)], memories, now)
        built = build(str(uri), lines, 1)
        meta.write_text(json.dumps({"now": now.isoformat()}))
        print(f"built {agents:,} x {memories} in {built:.1f} s", file=sys.stderr, flush=True)
    return uri, datetime.fromisoformat(json.loads(meta.read_text())["now"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[250, 1000, 2500])
    parser.add_argument("--memories", type=int, default=100)
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/engram_profile_sweep"))
    parser.add_argument("--no-profile", action="store_true", help="stage times only")
    parser.add_argument("--top", type=int, default=30, help="call sites printed per N")
    args = parser.parse_args()
    args.store_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    timed_stages(seconds)
    table: dict[int, dict[str, float]] = {}
    for n in args.agents:
        uri, now = pristine(args.store_dir, n, args.memories)
        work = args.store_dir / f"{n}x{args.memories}-run"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(uri, work)
        store = open_store(str(work), 1)
        agents = store.agents()
        print(f"load: {os.getloadavg()[0]:.2f}; {len(agents):,} agents", file=sys.stderr, flush=True)
        seconds.clear()
        profiler = None if args.no_profile else cProfile.Profile()
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        pipeline.pipeline_sweep(store, agents, now=now)
        if profiler:
            profiler.disable()
        table[n] = {**seconds, "total": time.perf_counter() - start}
        if profiler:
            print(f"\n== N = {n:,}: top {args.top} by cumulative time", flush=True)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.top)
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{'stage':<20}" + "".join(f"{f'N={n} s':>12}{'ms/agent':>10}" for n in table))
    for stage in (*STAGES, "total"):
        row = "".join(f"{table[n].get(stage, 0.0):>12.2f}{table[n].get(stage, 0.0) / n * 1000:>10.2f}" for n in table)
        print(f"{stage:<20}{row}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(
        f"load: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; peak RSS {rss:.0f} MiB"
        + ("" if args.no_profile else "; under cProfile")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
