"""Time the corpus-merge plan of one large agent: the neighbour graph, then the judge and the clusters.

    python bench/bench_merge_plan.py --n 100000 [--judge auto|rules]

Data: the synthetic clustered vectors of ``bench_neighbour_graph.py`` (10% planted near-duplicates at
cosine 0.86-0.99) with short memory-like texts: each base row a sentence of topic words, each planted copy
its source reworded (a word added, dropped or moved). Rows go into a real store as an import would, under
the MiniLM profile (its thresholds and judge; the model itself is not loaded: vectors are given).
Printed: rows, graph pairs, candidate pairs the judge saw, clusters, members, and wall / CPU seconds of the
graph and of the plan given the graph. Runs against any checkout (a tree without the judge plans with the
old band rule), so the figure before and after a change comes from the same script.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_neighbour_graph import synthetic  # noqa: E402
from results import Results  # noqa: E402

from engram_pipeline.lifecycle.corpus_merge import consolidate_corpus  # noqa: E402
from engram_pipeline.lifecycle.graph import agent_graph  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402

WORDS = [
    "deploy",
    "build",
    "cache",
    "queue",
    "user",
    "team",
    "editor",
    "theme",
    "region",
    "cluster",
    "budget",
    "ticket",
    "release",
    "branch",
    "service",
    "database",
    "backup",
    "invoice",
    "report",
    "schedule",
    "meeting",
    "project",
    "client",
    "server",
    "alert",
    "metric",
    "token",
    "plan",
]


def texts(n: int, sources: np.ndarray, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out: list[str] = []
    n_base = n - len(sources)
    for i in range(n_base):
        w = rng.choice(WORDS, size=4, replace=False)
        out.append(f"The {w[0]} of {w[1]} {i} uses the {w[2]} for {w[3]}.")
    for k, src in enumerate(sources.tolist()):
        words = out[src].rstrip(".").split()
        edit = k % 3
        if edit == 0:
            words.insert(len(words) - 1, "now")
        elif edit == 1:
            words = words[1:]
        else:
            words = words[-2:] + words[:-2]
        out.append(" ".join(words) + ".")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--judge", default="auto", help="ENGRAM_JUDGE (ignored by a tree without the judge)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    vectors, src, _ = synthetic(args.n, 384, topics=args.n // 100, dup_fraction=0.1, seed=args.seed)
    contents = texts(args.n, src, args.seed)
    env = {"ENGRAM_EMBEDDER": "minilm"}
    if any(f.name == "judge" for f in dataclasses.fields(Settings)):
        env["ENGRAM_JUDGE"] = args.judge
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(tmp, settings=Settings.from_env(env))
        t0 = time.perf_counter()
        for start in range(0, args.n, 20_000):
            rows = []
            for i in range(start, min(args.n, start + 20_000)):
                row = store.engine.new_row("big", contents[i], tier="ltm")
                row["vector"] = vectors[i].tolist()
                rows.append(row)
            store.engine.insert_rows(rows)
        s = store.settings
        setting = env.get("ENGRAM_JUDGE", "(none: band rule)")
        took = time.perf_counter() - t0
        print(
            f"inserted {args.n} rows in {took:.1f}s; band {s.merge_threshold}-{s.duplicate_threshold}, judge {setting}"
        )
        w0, c0 = time.perf_counter(), time.process_time()
        graph = agent_graph(store, "big")
        w1, c1 = time.perf_counter(), time.process_time()
        report = consolidate_corpus(store, "big", graph=graph)
        w2, c2 = time.perf_counter(), time.process_time()
        judge = getattr(report, "judge", "") or "band rule (before the judge)"
        print(f"graph: {graph.num_rows} pairs, {w1 - w0:.1f}s wall, {c1 - c0:.1f} CPU-s")
        print(f"plan ({judge}): {report.clusters} clusters, {report.merged} members")
        print(f"  plan given the graph {w2 - w1:.1f}s wall, {c2 - c1:.1f} CPU-s; with the graph {c2 - c0:.1f} CPU-s")
        results = Results("merge_plan", args)
        results.add(
            "plan",
            rows=args.n,
            judge=judge,
            graph_pairs=graph.num_rows,
            graph_wall_s=round(w1 - w0, 2),
            graph_cpu_s=round(c1 - c0, 2),
            clusters=report.clusters,
            members=report.merged,
            plan_wall_s=round(w2 - w1, 2),
            plan_cpu_s=round(c2 - c1, 2),
            cpu_s_with_graph=round(c2 - c0, 2),
        )
        results.save()


if __name__ == "__main__":
    main()
