"""Benchmark the store's write and recall paths, in process, on a real LanceDB directory.

    python bench/bench_store.py                                   # full run: 10k and 100k memories (~10 min)
    python bench/bench_store.py --sizes 2000 --minilm-rows 150    # quick run

Measured in one run (each figure is a median; the reference it is compared with is measured in the same run):

1. Remember throughput, hashing and minilm: single ``MemoryStore.remember`` calls (write-time dedup and
   contradiction checks, one commit each) against bulk ``import_jsonl`` (one ``embed`` call and one commit per
   batch, exact dedup only). Single calls: rows/s = 1 / median call time. Import: median over batches of
   rows/s. The reference is the embedder alone (``embed`` on the same texts, rows/s), so "import / embed"
   says how much the store adds on top of embedding. MiniLM embeds about 150 sentences/s on 2 cores, so its
   sample is small (``--minilm-rows``); its rows/s extrapolate linearly because the per-batch cost is embedding.
2. Recall latency p50/p95 for one agent among ``--agents`` agents, at each store size in ``--sizes``: the
   search itself (query vector given, no access bookkeeping), and the full ``recall(query)`` call with access
   bookkeeping (one append to the ``access_log`` table per call; the rows are untouched until a fold).
   Measured on a freshly imported store and again after ``maintain()`` (compaction, plus the IVF_HNSW_SQ
   vector index once the table has ``ENGRAM_VECTOR_INDEX_MIN_ROWS`` rows). Stores are filled with the hashing
   embedder (384 dimensions, the same as MiniLM, so the search cost is the same); the MiniLM query-embedding
   time is reported separately and adds to a MiniLM recall.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from results import Results  # bench/results.py

from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402

WORDS = (  # noqa: SIM905 (a word list reads better as prose)
    "build lockfile deploy travel flight hotel refund login session cookie paper protein search editor python "
    "berlin munich meeting invoice export timeout docker disk test ci release branch review customer plan "
    "android offline password email ticket escalate billing dataset license author journal seat window aisle "
    "train fare delay claim upgrade partner museum dinner vegetarian allergy budget grant deadline draft figure"
).split()


def texts(n: int, seed: int) -> list[str]:
    """Distinct sentence-like texts (random words plus a serial, so no two are exact duplicates)."""
    rng = random.Random(seed)
    return [f"{' '.join(rng.choices(WORDS, k=rng.randint(6, 14)))} #{seed}-{i}" for i in range(n)]


def open_store(root: Path, name: str, embedder: str) -> MemoryStore:
    settings = Settings.from_env({"ENGRAM_EMBEDDER": embedder, "ENGRAM_HOME": str(root)})
    return MemoryStore.open(str(root / name), settings=settings)


def timed_import(store: MemoryStore, lines: Sequence[dict[str, str]], batch_size: int) -> list[float]:
    """Import ``lines``; returns rows/s of each batch (timed between progress callbacks)."""
    rates: list[float] = []
    last = [time.perf_counter()]

    def tick(n: int) -> None:
        now = time.perf_counter()
        rates.append(n / (now - last[0]))
        last[0] = now

    report = import_jsonl(store, lines, batch_size=batch_size, progress=tick)
    assert report.errors == () and report.created == len(lines), report
    return rates


def bench_writes(root: Path, embedder: str, single: int, bulk: int, batch: int) -> dict[str, float]:
    store = open_store(root, f"writes-{embedder}", embedder)
    probe = texts(max(bulk, 64), seed=1)
    store.engine.embed(probe[:8])  # load the model before timing
    chunks = [probe[i : i + batch] for i in range(0, len(probe), batch)]
    embed_rates = []
    for chunk in chunks[:5]:
        t = time.perf_counter()
        store.engine.embed(chunk)
        embed_rates.append(len(chunk) / (time.perf_counter() - t))
    calls = []
    for i, text in enumerate(texts(single, seed=2)):
        t = time.perf_counter()
        store.remember(f"agent-{i % 10}", text, tier="ltm")
        calls.append(time.perf_counter() - t)
    lines = [{"agent_id": f"agent-{i % 10}", "content": c, "tier": "ltm"} for i, c in enumerate(texts(bulk, seed=3))]
    rates = timed_import(store, lines, batch)
    return {
        "embed rows/s": statistics.median(embed_rates),
        "remember rows/s": 1.0 / statistics.median(calls),
        "remember p50 ms": 1000 * statistics.median(calls),
        "import rows/s": statistics.median(rates),
    }


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(samples) * 1000
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 95))


def latencies(fn: Callable[[int], object], n: int) -> list[float]:
    fn(0)  # warm caches and the index
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def bench_recall(root: Path, size: int, agents: int, queries: int, batch: int) -> list[tuple[str, float, float]]:
    store = open_store(root, f"recall-{size}", "hashing")
    lines = [{"agent_id": f"agent-{i % agents:03d}", "content": c, "tier": "ltm"} for i, c in enumerate(texts(size, 7))]
    t = time.perf_counter()
    import_jsonl(store, lines, batch_size=batch)
    print(f"  filled {size} rows ({agents} agents) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    agent = "agent-042" if agents > 42 else "agent-000"
    qtexts = texts(queries, seed=11)
    qvecs = store.engine.embed(qtexts).tolist()
    out = []
    for phase in ("fresh", "maintained"):
        if phase == "maintained":
            report = store.maintain()
            print(f"  maintain: {report.duration_s:.1f} s, built {report.indexes}", file=sys.stderr)
        search = latencies(lambda i: store.recall(agent, vector=qvecs[i % queries], k=10, track_access=False), queries)
        full = latencies(lambda i: store.recall(agent, qtexts[i % queries], k=10), max(20, queries // 4))
        out.append((f"{size // 1000}k {phase}: search", *percentiles(search)))
        out.append((f"{size // 1000}k {phase}: recall+access", *percentiles(full)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="store sizes for recall latency")
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--single-rows", type=int, default=300, help="single remember calls (hashing)")
    ap.add_argument("--bulk-rows", type=int, default=20000, help="rows imported in bulk (hashing)")
    ap.add_argument("--minilm-rows", type=int, default=500, help="rows imported with minilm")
    ap.add_argument("--minilm-single", type=int, default=50, help="single remember calls with minilm")
    ap.add_argument("--batch-size", type=int, default=1000)
    args = ap.parse_args()
    results = Results("store", args)
    root = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    try:
        print(f"cores: {os.cpu_count()}; store under {root}", file=sys.stderr)
        writes = {"hashing": bench_writes(root, "hashing", args.single_rows, args.bulk_rows, args.batch_size)}
        try:
            writes["minilm"] = bench_writes(
                root, "minilm", args.minilm_single, args.minilm_rows, min(args.batch_size, 250)
            )
        except Exception as exc:  # the [minilm] extra is optional
            print(f"minilm skipped: {exc}", file=sys.stderr)
        print("\nremember throughput (medians)")
        head = ("embed only", "remember", "import", "import/remember", "import/embed")
        print(f"{'embedder':<9} {head[0]:>12} {head[1]:>12} {head[2]:>12} {head[3]:>16} {head[4]:>13}")
        for name, w in writes.items():
            print(
                f"{name:<9} {w['embed rows/s']:>10.0f}/s {w['remember rows/s']:>10.1f}/s {w['import rows/s']:>10.0f}/s "
                f"{w['import rows/s'] / w['remember rows/s']:>15.1f}x {w['import rows/s'] / w['embed rows/s']:>12.2f}x"
            )
            results.add(
                "remember_throughput",
                embedder=name,
                embed_rows_per_s=w["embed rows/s"],
                remember_rows_per_s=w["remember rows/s"],
                remember_p50_ms=w["remember p50 ms"],
                import_rows_per_s=w["import rows/s"],
                import_over_remember=w["import rows/s"] / w["remember rows/s"],
                import_over_embed=w["import rows/s"] / w["embed rows/s"],
            )
        if "minilm" in writes:
            q = open_store(root, "writes-minilm", "minilm")
            per_query = latencies(lambda i: q.engine.embed([f"query number {i}"]), 30)
            print(f"minilm query embedding: p50 {1000 * statistics.median(per_query):.1f} ms (adds to a minilm recall)")
            results.add("minilm_query_embedding", p50_ms=1000 * statistics.median(per_query))
        print(f"\nrecall latency, one agent among {args.agents}, k=10 (ms)")
        print(f"{'store':<30} {'p50':>8} {'p95':>8}")
        for size in (int(s) for s in args.sizes.split(",")):
            for label, p50, p95 in bench_recall(root, size, args.agents, args.queries, args.batch_size):
                print(f"{label:<30} {p50:>8.1f} {p95:>8.1f}")
                results.add("recall_latency", rows=size, agents=args.agents, store=label, p50_ms=p50, p95_ms=p95)
        results.save()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
