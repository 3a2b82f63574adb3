"""What a veto costs: the corpus-merge plan of one agent before and after every cluster of it was rejected.

    python bench/bench_merge_review.py --n 20000

Data as ``bench_merge_plan.py`` (10% planted rewordings, MiniLM profile and judge, vectors given). Printed: the
plan's clusters and CPU seconds given the graph (the reference), the apply that rejects every cluster (the
rejections recorded, nothing merged), then the plan again with every pair of those clusters vetoed: its
clusters (none may pair two rows of a rejected cluster) and CPU seconds, as a ratio to the reference.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_merge_plan import texts  # noqa: E402
from bench_neighbour_graph import synthetic  # noqa: E402
from results import Results  # noqa: E402

from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus  # noqa: E402
from engram_pipeline.lifecycle.graph import agent_graph  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402


def cpu(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    c0 = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    results = Results("merge_review", args)

    vectors, src, _ = synthetic(args.n, 384, topics=args.n // 100, dup_fraction=0.1, seed=args.seed)
    contents = texts(args.n, src, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(tmp, settings=Settings.from_env({"ENGRAM_EMBEDDER": "minilm"}))
        for start in range(0, args.n, 20_000):
            rows = []
            for i in range(start, min(args.n, start + 20_000)):
                row = store.engine.new_row("big", contents[i], tier="ltm")
                row["vector"] = vectors[i].tolist()
                rows.append(row)
            store.engine.insert_rows(rows)
        graph = agent_graph(store, "big")
        plan, ref = cpu(consolidate_corpus, store, "big", graph=graph)
        print(f"{args.n} rows; plan: {plan.clusters} clusters, {plan.merged} members, {ref:.2f} CPU-s given the graph")
        results.add("plan", rows=args.n, clusters=plan.clusters, members=plan.merged, cpu_s=ref)
        every = range(1, plan.clusters + 1)
        applied, took = cpu(apply_corpus_merge, store, "big", plan.plan_id, reject=every)
        print(f"apply rejecting all {len(applied.rejected)} clusters: {applied.merged} merged, {took:.2f} CPU-s")
        results.add("apply_rejecting_all", rejected=len(applied.rejected), merged=applied.merged, cpu_s=took)
        again, vetoed = cpu(consolidate_corpus, store, "big", graph=graph)
        rejected = {frozenset(p) for c in plan.per_cluster for p in combinations(rows_of(c), 2)}
        proposed = {frozenset((c["canonical_id"], m["id"])) for c in again.per_cluster for m in c["members"]}
        print(
            f"plan with every pair of them vetoed: {again.clusters} clusters ({len(proposed & rejected)} pairs of a "
            f"rejected cluster), {vetoed:.2f} CPU-s ({vetoed / ref:.2f}x the plan before the rejections)"
        )
        results.add(
            "plan_vetoed",
            clusters=again.clusters,
            rejected_pairs_proposed=len(proposed & rejected),
            cpu_s=vetoed,
            ratio_to_plan=vetoed / ref,
        )
    results.save()


def rows_of(cluster: dict) -> list[str]:  # type: ignore[type-arg]
    return [cluster["canonical_id"], *(m["id"] for m in cluster["members"])]


if __name__ == "__main__":
    main()
