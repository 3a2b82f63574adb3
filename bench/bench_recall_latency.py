"""Recall latency at scale: in process and through HTTP (a real uvicorn process), plus recall@10 of the index.

Builds ``--memories`` rows over ``--agents`` agents (default 20k over 20; the target figure is 100k over 100)
by writing Arrow batches straight into ``store.engine.memories`` with hashing vectors, then runs ``store.maintain()``
(compaction, scalar indexes, and the vector index once the table passes ``ENGRAM_VECTOR_INDEX_MIN_ROWS``).

Measured, each as p50 / p99 over ``--queries`` random (agent, query) pairs:

* in process: ``store.recall`` as the API calls it (no vectors returned) without logging the reads, and
  with each recall's reads appended to the access log inline (one commit to ``access_log`` per recall);
* HTTP: ``POST /v1/memories/recall`` over a keep-alive httpx client, against the server as it runs by default
  (reads collected and appended to the access log once a second) and with inline logging
  (``--access-interval-ms 0``). Neither writes to ``memories``, so the vector index keeps covering every row;
* the fold: what a pass does with the log the HTTP phase left (claim, version-checked increments, delete,
  and a re-index once ``ENGRAM_INDEX_REFRESH_ROWS`` rows are outside the index), then in-process recall
  again;
* recall@10 of the filtered vector search against an exact numpy search over the agent's rows;
* with ``--fold-cycles N``: N cycles of 1000 recalls whose reads are logged and then folded, with the p50,
  fragments and index segments after each, then maintenance (the drift between maintenance runs);
* with ``--minilm``: the time MiniLM takes to embed one query (what it adds to every recall).

Ratios are quoted against the in-process recall measured in the same run.

    python bench/bench_recall_latency.py --memories 100000 --agents 100 --queries 1000 --minilm
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

import httpx
import numpy as np
from results import Results  # bench/results.py

from engram_pipeline.model import rows_to_table, utcnow
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.recall import candidates
from engram_pipeline.store.sql import eq

_WORDS = (
    "alpha amber anchor apple arrow autumn badge bakery banner basil beacon berry blossom border breeze bridge "
    "cabin candle canyon carbon castle cedar cellar chalk cherry cider circle cloud clover cobalt comet copper "
    "coral cotton crane crystal dawn delta desert diamond dolphin dragon dune eagle ember engine falcon fern "
    "ferry fjord flame forest fossil fountain garden garnet ginger glacier granite harbor hazel heron hollow "
    "island ivory jasmine jungle kernel kettle lagoon lantern lemon lily linen lotus maple marble meadow "
    "meteor mint mirror monsoon mosaic nectar nova oasis olive onyx orbit orchid otter pebble pepper pine "
    "planet plaza prism quartz quill raven reef ribbon river saffron sage salmon satin shadow silver spruce "
    "summit thunder timber topaz tulip tundra velvet violet walnut willow zephyr"
)
WORDS = _WORDS.split()


def pct(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p99_ms": round(float(np.percentile(a, 99)), 2)}


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def build(store: MemoryStore, n: int, agents: int, seed: int, batch: int = 10_000) -> dict[str, float]:
    rng = random.Random(seed)
    now = utcnow()
    t0 = time.perf_counter()
    embed_s = 0.0
    for start in range(0, n, batch):
        rows = []
        for i in range(start, min(n, start + batch)):
            agent = f"agent-{i % agents:03d}"
            created = now - timedelta(days=rng.uniform(0, 60))
            rows.append(
                store.engine.new_row(
                    agent, f"note {i}: {sentence(rng, 8)}", tier="ltm", created_at=created, importance=rng.random()
                )
            )
        t = time.perf_counter()
        vectors = store.engine.embed([r["content"] for r in rows])
        embed_s += time.perf_counter() - t
        for r, v in zip(rows, vectors, strict=True):
            r["vector"] = v
        store.engine.memories.add(rows_to_table(rows, store.engine.memory_schema))
    build_s = time.perf_counter() - t0
    t = time.perf_counter()
    report = store.maintain()
    return {
        "rows": n,
        "build_s": round(build_s, 1),
        "embed_s": round(embed_s, 1),
        "maintain_s": round(time.perf_counter() - t, 1),
        "indexes_built": list(report.indexes),
    }


def fragments(store: MemoryStore) -> dict[str, int]:
    stats = store.engine.memories.stats()["fragment_stats"]
    index = store.engine.memories.index_stats("vector_idx")
    unindexed = int(index.num_unindexed_rows) if index is not None else -1
    return {"fragments": int(stats["num_fragments"]), "unindexed_rows": unindexed}


def queries(agents: int, count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed + 1)
    return [(f"agent-{rng.randrange(agents):03d}", sentence(rng, 4)) for _ in range(count)]


def in_process(store: MemoryStore, qs: list[tuple[str, str]], *, track_access: bool) -> list[float]:
    out = []
    for agent, q in qs:
        t = time.perf_counter()
        store.recall(agent, q, k=10, track_access=track_access, with_vectors=False)  # as the API calls it
        out.append(time.perf_counter() - t)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def over_http(uri: str, qs: list[tuple[str, str]], *, access_interval_ms: float, warmup: int = 20) -> dict:
    port = free_port()
    env = {**os.environ, "ENGRAM_EMBEDDER": "hashing", "ENGRAM_DB_URI": uri, "ENGRAM_API_KEYS": ""}
    cmd = [sys.executable, "-m", "engram_pipeline.api", "--port", str(port)]
    cmd += ["--access-interval-ms", str(access_interval_ms)]
    server = subprocess.Popen(cmd, env=env, cwd=tempfile.gettempdir())
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            for _ in range(300):
                try:
                    client.get("/openapi.json")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            for agent, q in qs[:warmup]:
                client.post("/v1/memories/recall", json={"agent_id": agent, "query": q, "k": 10})
            lat = []
            for agent, q in qs:
                t = time.perf_counter()
                r = client.post("/v1/memories/recall", json={"agent_id": agent, "query": q, "k": 10})
                lat.append(time.perf_counter() - t)
                r.raise_for_status()
        return pct(lat)
    finally:
        server.terminate()
        server.wait(timeout=30)


def fold(store: MemoryStore) -> dict:
    """Fold every agent's logged reads into ``memories``, as promotion and decay do at their start."""
    t = time.perf_counter()
    report = store.engine.fold_access()
    return {**asdict(report), "seconds": round(time.perf_counter() - t, 2)}


def fold_cycles(store: MemoryStore, agents: int, cycles: int, seed: int) -> dict:
    """Steady traffic: each cycle logs 1000 recalls' reads (one append per 60, a second at 60 recalls/s) and
    folds them, as promotion does every 5 minutes; then in-process p50 on a fixed probe. Maintenance last."""
    probe = queries(agents, 300, seed + 99)

    def shape() -> dict:
        index = store.engine.memories.index_stats("vector_idx")
        segments = int(index.num_indices) if index is not None else 0
        return {**fragments(store), "index_segments": segments, **pct(in_process(store, probe, track_access=False))}

    out: dict = {"start": shape(), "cycles": []}
    for cycle in range(cycles):
        qs = queries(agents, 1000, seed + 1000 + cycle)
        for start in range(0, len(qs), 60):
            hits = []
            for agent, q in qs[start : start + 60]:
                hits += [h.memory for h in store.recall(agent, q, k=10, track_access=False, with_vectors=False)]
            store.engine.log_access(hits)
        t = time.perf_counter()
        report = store.engine.fold_access()
        fold_s = round(time.perf_counter() - t, 2)
        out["cycles"].append({"fold_s": fold_s, "rows": report.rows, "reindexed": report.reindexed, **shape()})
    t = time.perf_counter()
    built = store.maintain().indexes
    out["maintain"] = {"seconds": round(time.perf_counter() - t, 1), "indexes_built": list(built), **shape()}
    return out


def recall_at_10(store: MemoryStore, qs: list[tuple[str, str]]) -> dict[str, float]:
    """The 10 nearest of recall's candidate search (index if built, 40 candidates, exact re-rank) against
    exact cosine over the agent's rows; and the time of a flat scan instead."""
    hits, ann_t, flat_t = [], [], []
    for agent, q in qs:
        qv = store.engine.embed([q])[0]
        table = store.engine.scan(agent, columns=["id", "vector"])
        vecs = np.asarray(table["vector"].to_pylist(), dtype=np.float32)
        sims = vecs @ qv / (np.linalg.norm(vecs, axis=1) * np.linalg.norm(qv) + 1e-12)
        ids = table["id"].to_numpy(zero_copy_only=False)
        exact = set(ids[np.argsort(-sims, kind="stable")[:10]])
        t = time.perf_counter()
        found = candidates(store.engine, qv, eq("agent_id", agent), pool=40, columns=["id"])  # as recall searches
        order = np.argsort(found["_distance"].to_numpy(), kind="stable")[:10]
        got = set(found["id"].to_numpy(zero_copy_only=False)[order])
        ann_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        flat = store.engine.memories.search(qv).metric("cosine").where(eq("agent_id", agent), prefilter=True).limit(10)
        flat.bypass_vector_index().select(["id", "_distance"]).to_arrow()
        flat_t.append(time.perf_counter() - t)
        hits.append(len(exact & got) / 10)
    return {
        "recall_at_10": round(float(np.mean(hits)), 3),
        "search": pct(ann_t),
        "flat_scan": pct(flat_t),
    }


def minilm_query_cost(count: int) -> dict | str:
    try:
        from engram_pipeline.embed import get_embedder

        model = get_embedder(Settings(embedder="minilm"))
        model.embed(["warm up"])
    except Exception as exc:  # the optional extra may be missing
        return f"unavailable: {exc}"
    rng = random.Random(7)
    lat = []
    for _ in range(count):
        q = sentence(rng, 6)
        t = time.perf_counter()
        model.embed([q])
        lat.append(time.perf_counter() - t)
    return pct(lat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=20_000)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--inline-queries", type=int, default=100, help="recalls logged inline (a commit each)")
    ap.add_argument("--recall-queries", type=int, default=100)
    ap.add_argument("--index-min-rows", type=int, default=None, help="override ENGRAM_VECTOR_INDEX_MIN_ROWS")
    ap.add_argument("--dir", default=None, help="store directory (reused if it holds a store; default: temp)")
    ap.add_argument("--minilm", action="store_true")
    ap.add_argument("--fold-cycles", type=int, default=0, help="cycles of logged recalls and a fold")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    env = {"ENGRAM_EMBEDDER": "hashing"}
    if args.index_min_rows is not None:
        env["ENGRAM_VECTOR_INDEX_MIN_ROWS"] = str(args.index_min_rows)
    settings = Settings.from_env(env)
    tmp = None
    if args.dir is None:
        tmp = tempfile.mkdtemp(prefix="engram-bench-")
        uri = str(Path(tmp) / "store")
    else:
        uri = args.dir
    try:
        store = MemoryStore.open(uri, settings=settings)
        out: dict = {"memories": args.memories, "agents": args.agents, "cpus": os.cpu_count()}
        if store.engine.memories.count_rows() == 0:
            out["build"] = build(store, args.memories, args.agents, args.seed)
        else:  # a reused store: fold and compact what earlier runs left
            t = time.perf_counter()
            store.maintain()
            out["maintain_reused_s"] = round(time.perf_counter() - t, 1)
        out["indexes"] = sorted(i.columns[0] for i in store.engine.memories.list_indices())
        out["fragments_before"] = fragments(store)
        qs = queries(args.agents, args.queries, args.seed)
        in_process(store, qs[:20], track_access=False)  # warm caches
        ref = in_process(store, qs, track_access=False)
        out["in_process"] = pct(ref)
        out["vector_search"] = recall_at_10(store, qs[: args.recall_queries])
        out["in_process_logged"] = pct(in_process(store, qs[: args.inline_queries], track_access=True))
        out["http_deferred_log_1s"] = over_http(uri, qs, access_interval_ms=1000)
        out["fragments_after_http"] = fragments(store)
        out["fold"] = fold(store)
        out["fragments_after_fold"] = fragments(store)
        out["in_process_after_fold"] = pct(in_process(store, qs, track_access=False))
        out["http_inline_log"] = over_http(uri, qs[: args.inline_queries], access_interval_ms=0)
        base = out["in_process"]["p50_ms"]
        out["ratio_p50_vs_in_process"] = {
            k: round(out[k]["p50_ms"] / base, 2)
            for k in ("in_process_logged", "http_deferred_log_1s", "in_process_after_fold", "http_inline_log")
        }
        out["vector_search_after_fold"] = recall_at_10(store, qs[: args.recall_queries])
        if args.fold_cycles:
            out["fold_cycles"] = fold_cycles(store, args.agents, args.fold_cycles, args.seed)
        if args.minilm:
            out["minilm_query_embedding"] = minilm_query_cost(50)
        print(json.dumps(out, indent=2))
        results = Results("recall_latency", args)  # the printed JSON's objects as sections, its plain values as "run"
        results.add("run", **{k: v for k, v in out.items() if not isinstance(v, dict)})
        for section, figures in out.items():
            if isinstance(figures, dict):
                results.add(section, **figures)
        results.save()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
