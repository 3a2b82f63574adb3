"""Benchmark the online write path: single ``remember`` at two table sizes (and while a second store writes to
the same table), 16 HTTP clients (group commit),
MiniLM ``remember`` against its embedding time, bulk import against raw embedding, and fragments after a run of
single writes with recall on them against a freshly compacted store.

    python bench/bench_write_path.py                      # the sizes issue 12 names (100k rows, 10k writes)
    python bench/bench_write_path.py --small 1000 --large 10000 --single 100 --fragment-writes 500 \
        --shared-writes 50 --http-writes 40 --bulk-rows 20000 --minilm-rows 200   # quick (``make bench``)

Every figure is printed beside the reference measured in the same run (the 1k-row store for the large one,
the same store's writes alone for those beside another writer,
one HTTP client for sixteen, embedding alone for MiniLM ``remember`` and for bulk import, a compacted store
for recall). The machine is shared: the ``uptime`` load is printed first; compare ratios, not absolutes.

Targets (issue 12): single remember p50 <= 10 ms and p99 <= 50 ms at 100k rows, p50 at 100k within 1.5x of
1k; 16 clients >= 500 remembers/s with 0 lost and 0 duplicate rows; MiniLM remember p50 <= embed + 10 ms;
bulk import >= 10,000 rows/s (hashing) and >= 90% of raw batch embedding (MiniLM).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from http.client import HTTPConnection
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import open_store, texts  # noqa: E402
from results import Results  # noqa: E402

import engram_pipeline  # noqa: E402
from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.judge import get_judge  # noqa: E402
from engram_pipeline.model import rows_to_table  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402

AGENTS = 10


def ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000, q))


def fill(store: MemoryStore, n: int, seed: int) -> None:
    lines = [{"agent_id": f"agent-{i % AGENTS}", "content": c, "tier": "ltm"} for i, c in enumerate(texts(n, seed))]
    t = time.perf_counter()
    import_jsonl(store, lines, batch_size=5000, checks="exact")  # a store of that size, not an import figure
    store.maintain()  # a store of that size as it stands in service: compacted and indexed
    print(f"  filled {n} rows and maintained in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)


def single_writes(store: MemoryStore, n: int, seed: int) -> list[float]:
    out = []
    for i, text in enumerate(texts(n, seed)):
        t = time.perf_counter()
        store.remember(f"agent-{i % AGENTS}", text, tier="ltm")
        out.append(time.perf_counter() - t)
    return out


def fragments(store: MemoryStore) -> int:
    return int(store.engine.memories.stats()["fragment_stats"]["num_fragments"])


def bare_commits(store: MemoryStore, n: int) -> list[float]:
    """``n`` one-row ``table.add`` calls to a fresh table of ``memories``' schema in the store's directory:
    the floor of a write acknowledged after its Lance commit."""
    row = store.engine.new_row("floor", "a row")
    row["vector"] = store.engine.embed(["a row"])[0].tolist()
    table = store.engine.db.create_table("bare_commit_floor", schema=store.engine.memory_schema)
    out = []
    for i in range(n):
        one = rows_to_table([{**row, "id": f"floor-{i}"}], store.engine.memory_schema)
        t = time.perf_counter()
        table.add(one)
        out.append(time.perf_counter() - t)
    return out


def bench_single(results: Results, root: Path, small: int, large: int, n: int) -> None:
    p50 = {}
    print(f"\nsingle remember, one client, hashing, {n} writes (ms); floor: a bare one-row table.add, same dir")
    print("  (after one first write per agent, which reads its rows into the write cache: 'first' p50 / max;")
    cache_rows = Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}).write_cache_rows  # as open_store opens them
    print(f"  ENGRAM_WRITE_CACHE_ROWS={cache_rows}; loads and refreshes of agents' views during the timed")
    print("  writes: 'loads', 'refreshes', and 'rereads', the refreshes that read the agent's (id, version) whole)")
    head = f"{'rows in store':<16} {'p50':>8} {'p99':>8} {'fragments after':>16} {'floor p50':>10} {'floor p99':>10}"
    print(f"{head} {'first p50':>10} {'first max':>10} {'loads':>6} {'refreshes':>10} {'rereads':>8}")
    for size in (small, large):
        store = open_store(root, f"single-{size}", "hashing")
        fill(store, size, seed=size)
        # one write to each agent: the first loads the agent's rows into the write cache (store/write/cache.py),
        # as a server's first write of an agent does; timed apart from the steady writes
        first = single_writes(store, AGENTS, seed=size + 2)
        cache = store.engine.write_cache
        before = cache.loads, cache.refreshes, cache.rereads
        calls = single_writes(store, n, seed=size + 1)
        loads, refreshes, rereads = (
            now - then for now, then in zip((cache.loads, cache.refreshes, cache.rereads), before, strict=True)
        )
        floor = bare_commits(store, n)
        p50[size] = ms(calls, 50)
        line = f"{size:<16} {p50[size]:>8.1f} {ms(calls, 99):>8.1f} {fragments(store):>16}"
        line += f" {ms(floor, 50):>10.1f} {ms(floor, 99):>10.1f} {ms(first, 50):>10.1f} {ms(first, 100):>10.1f}"
        print(f"{line} {loads:>6} {refreshes:>10} {rereads:>8}", flush=True)
        results.add(
            "single",
            rows=size,
            writes=n,
            p50_ms=ms(calls, 50),
            p99_ms=ms(calls, 99),
            floor_p50_ms=ms(floor, 50),
            first_p50_ms=ms(first, 50),
            fragments_after=fragments(store),
            loads=loads,
            refreshes=refreshes,
            rereads=rereads,
        )
    print(f"p50 at {large} / p50 at {small}: {p50[large] / p50[small]:.2f}x (target <= 1.5x)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_burst(base: str, clients: int, writes: int, tag: str) -> tuple[float, dict[str, str], int, float]:
    """``clients`` threads, each ``writes`` remembers over its own keep-alive connection; half of every client's
    contents are shared with all the others (the same text raced by every client). Returns (remembers/s,
    content -> acknowledged id, errors, this process's CPU seconds per remember).

    The clients use the standard library's ``http.client``: they share the machine's 2 cores with the server,
    and httpx, which this burst used before, spent 1.1-1.5 ms of CPU per request against 0.25-0.3 ms here
    (the same server, alternated): a load generator heavier than the server's own work per request."""
    host, port = base.removeprefix("http://").split(":")
    # Each burst's texts are its own (seeded by the tag's characters): with one seed for "solo" and "race"
    # (both 4 letters) the second burst's texts were near duplicates of the first's, and every write of it
    # collapsed into a stored row (a compare-and-set each), which is not what this figure is about.
    salt = sum(map(ord, tag)) * 1000
    shared = [f"shared {tag}: {t}" for t in texts(writes // 2, seed=salt)]
    acked: dict[str, set[str]] = {}
    errors = [0]
    lock = threading.Lock()
    go = threading.Event()
    headers = {"Authorization": "Bearer tok-bench", "Content-Type": "application/json"}

    def client(k: int) -> None:
        own = [f"client {k} {tag}: {t}" for t in texts(writes - len(shared), seed=salt + 100 + k)]
        http = HTTPConnection(host, int(port), timeout=120)
        go.wait()
        for content in [c for pair in zip(shared, own, strict=False) for c in pair] + own[len(shared) :]:
            body = json.dumps({"agent_id": "bench", "content": content, "tier": "ltm"})
            http.request("POST", "/v1/memories", body=body, headers=headers)
            response = http.getresponse()
            answer = response.read()
            with lock:
                if response.status in (200, 201):
                    acked.setdefault(content, set()).add(json.loads(answer)["memory"]["id"])
                else:
                    errors[0] += 1
        http.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    start, cpu = time.perf_counter(), time.process_time()
    go.set()
    for t in threads:
        t.join()
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    split = sum(1 for ids in acked.values() if len(ids) > 1)  # one content told two different ids
    return (
        clients * writes / took,
        {c: next(iter(ids)) for c, ids in acked.items()},
        errors[0] + split,
        cpu / (clients * writes),
    )


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_http(results: Results, root: Path, clients: int, writes: int) -> None:
    uri = str(root / "http")
    open_store(root, "http", "hashing").remember("bench", "an earlier memory so the table exists")
    port = free_port()
    env = {
        **os.environ,
        "ENGRAM_EMBEDDER": "hashing",
        "ENGRAM_DB_URI": uri,
        "ENGRAM_HOME": str(root),
        "ENGRAM_API_KEYS": "bench:tok-bench:bench",
        # the library this process imported (PYTHONPATH=/other/checkout benches that checkout's code)
        "PYTHONPATH": str(Path(engram_pipeline.__file__).resolve().parents[1]),
    }
    cmd = [sys.executable, "-m", "engram_pipeline.api", "--port", str(port)]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx

        for _ in range(600):
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        one, _, _, _ = http_burst(base, 1, writes, "solo")
        served = cpu_seconds(server.pid)
        many, acked, errors, client_cpu = http_burst(base, clients, writes, "race")
        served = (cpu_seconds(server.pid) - served) / (clients * writes)
    finally:
        server.terminate()
        server.wait(timeout=30)
    store = MemoryStore.open(uri, settings=open_store(root, "http", "hashing").settings)
    rows = store.engine.scan("bench", columns=["id", "content"]).to_pylist()
    present = {r["id"] for r in rows}
    lost = sum(1 for i in acked.values() if i not in present)
    dupes = sum(n - 1 for n in Counter(r["content"] for r in rows).values() if n > 1)
    print(f"\nHTTP remember, hashing, {writes} writes per client (half of them raced by every client)")
    print(f"1 client: {one:.0f}/s; {clients} clients: {many:.0f}/s ({many / one:.1f}x; target >= 500/s)")
    print(f"  CPU per remember, {clients} clients: server {served * 1000:.2f} ms, clients {client_cpu * 1000:.2f} ms")
    print(f"lost acknowledged writes: {lost}; duplicate rows: {dupes}; errors or split ids: {errors}")
    results.add(
        "http",
        clients=clients,
        writes_per_client=writes,
        one_client_per_s=one,
        clients_per_s=many,
        server_cpu_ms=served * 1000,
        lost=lost,
        duplicate_rows=dupes,
        errors=errors,
    )


def bench_minilm(results: Results, root: Path, single: int, rows: int) -> None:
    try:
        store = open_store(root, "minilm", "minilm")
        store.engine.embed(["warm up"])
    except Exception as exc:  # the [minilm] extra is optional
        print(f"\nminilm skipped: {exc}")
        return
    embeds, calls, own = [], [], []
    embed = store.engine.embed

    def timed_embed(contents: Sequence[str]) -> np.ndarray:  # the embedding inside remember's batch
        t = time.perf_counter()
        out = embed(contents)
        own.append(time.perf_counter() - t)
        return out

    for i, (probe, text) in enumerate(zip(texts(single, 21), texts(single, 22), strict=True)):
        # interleaved, so both see the same load (torch's threads feel the neighbours' work most)
        t = time.perf_counter()
        store.engine.embed([probe])
        embeds.append(time.perf_counter() - t)
        store.engine.embed = timed_embed  # type: ignore[method-assign]
        t = time.perf_counter()
        store.remember(f"agent-{i % AGENTS}", text, tier="ltm")
        calls.append(time.perf_counter() - t)
        store.engine.embed = embed  # type: ignore[method-assign]
    rest = [c - e for c, e in zip(calls, own, strict=True)]
    batch = texts(rows, 23)
    t = time.perf_counter()
    store.engine.embed(batch)
    raw = rows / (time.perf_counter() - t)
    lines = [{"agent_id": f"agent-{i % AGENTS}", "content": c, "tier": "ltm"} for i, c in enumerate(texts(rows, 24))]
    t = time.perf_counter()
    # the importer's (and `engram import`'s) default batch of 1,000 lines, one embedding call each, as the raw
    # reference above is one call: in batches of 250 the import ran at 89% of it (the smaller calls cost ~3%)
    import_jsonl(store, lines)
    imported = rows / (time.perf_counter() - t)
    judge = get_judge(store).name
    target = 25 if judge.startswith("pair:") else 10  # issue 32 gives the pair model's reading 15 ms more
    print(f"\nminilm ({judge}): embed p50 {ms(embeds, 50):.1f} ms, remember p50 {ms(calls, 50):.1f} ms ", end="")
    print(f"(+{ms(calls, 50) - ms(embeds, 50):.1f} ms; target <= +{target} ms)")
    # The same gap per call (each remember less its own embedding): two noisy medians of ~100 ms differ by
    # more than the 10 ms asked about when torch shares busy cores; this difference does not carry that noise.
    print(f"minilm: remember less its own embedding, per call: p50 {ms(rest, 50):.1f} ms, p99 {ms(rest, 99):.1f}")
    print(f"minilm bulk import {imported:.0f} rows/s vs raw batch embedding {raw:.0f}/s: {imported / raw:.0%}")
    results.add(
        "minilm",
        judge=judge,
        embed_p50_ms=ms(embeds, 50),
        remember_p50_ms=ms(calls, 50),
        after_embedding_p50_ms=ms(rest, 50),
        after_embedding_p99_ms=ms(rest, 99),
        import_rows_per_s=imported,
        raw_embedding_rows_per_s=raw,
    )


def bench_bulk(results: Results, root: Path, rows: int) -> None:
    store = open_store(root, "bulk", "hashing")
    contents = texts(rows, 31)
    t = time.perf_counter()
    for i in range(0, rows, 5000):
        store.engine.embed(contents[i : i + 5000])
    raw = rows / (time.perf_counter() - t)
    lines = [{"agent_id": f"agent-{i % AGENTS}", "content": c, "tier": "ltm"} for i, c in enumerate(contents)]
    t = time.perf_counter()
    exact = import_jsonl(open_store(root, "bulk-exact", "hashing"), lines, batch_size=5000, checks="exact")
    exact_rate = rows / (time.perf_counter() - t)
    t = time.perf_counter()
    report = import_jsonl(store, lines, batch_size=5000)
    imported = rows / (time.perf_counter() - t)
    assert report.created == exact.created == rows, report  # distinct serials: the judge merges none
    print(f"\nbulk import, hashing, {rows} rows: {imported:.0f} rows/s vs raw embedding {raw:.0f}/s ", end="")
    print(f"({imported / raw:.0%}; target >= 10,000 rows/s)")
    print(
        f"  remember's checks: {report.contradictions} contradictions recorded; exact dedup only (checks='exact'): ",
        end="",
    )
    print(f"{exact_rate:.0f} rows/s (checked {imported / exact_rate:.0%} of it)")
    results.add(
        "bulk",
        rows=rows,
        checked_rows_per_s=imported,
        exact_rows_per_s=exact_rate,
        raw_embedding_rows_per_s=raw,
        contradictions=report.contradictions,
    )


def bench_fragments(results: Results, root: Path, writes: int, queries: int) -> None:
    store = open_store(root, "fragments", "hashing")
    fill(store, 1000, seed=41)
    t = time.perf_counter()
    single_writes(store, writes, 42)
    took = time.perf_counter() - t
    qvecs = store.engine.embed(texts(queries, 43)).tolist()

    def recall_p50() -> float:
        out = []
        for i in range(queries):
            t = time.perf_counter()
            store.recall(f"agent-{i % AGENTS}", vector=qvecs[i], k=10, track_access=False)
            out.append(time.perf_counter() - t)
        return ms(out, 50)

    before, after_writes = fragments(store), recall_p50()
    store.maintain()
    compacted = recall_p50()
    print(f"\n{writes} single writes in {took:.0f} s ({writes / took:.0f}/s): {before} fragments in memories")
    print(f"recall p50 then {after_writes:.1f} ms vs freshly compacted {compacted:.1f} ms ", end="")
    print(f"({after_writes / compacted:.2f}x)")
    results.add(
        "fragments",
        writes=writes,
        writes_per_s=writes / took,
        fragments=before,
        recall_p50_ms=after_writes,
        recall_p50_compacted_ms=compacted,
    )


def bench_shared(results: Results, root: Path, rows: int, n: int) -> None:
    """Single writes while a second store on the same table (what a second server process sees) commits
    between every two of them: each write's checks must first bring the write cache's views up to date."""
    store = open_store(root, "shared", "hashing")
    fill(store, rows, seed=51)
    other = open_store(root, "shared", "hashing")
    single_writes(store, AGENTS, seed=52)  # each agent's view read once, as in bench_single
    single_writes(other, AGENTS, seed=53)
    alone = single_writes(store, n, seed=54)
    cache = store.engine.write_cache
    before = cache.refreshes, cache.rereads
    shared = []
    for i, (mine, theirs) in enumerate(zip(texts(n, 55), texts(n, 56), strict=True)):
        other.remember(f"agent-{i % AGENTS}", theirs, tier="ltm")
        t = time.perf_counter()
        store.remember(f"agent-{i % AGENTS}", mine, tier="ltm")
        shared.append(time.perf_counter() - t)
    refreshes, rereads = cache.refreshes - before[0], cache.rereads - before[1]
    print(f"\nsingle remember, {rows} rows, another store's commit before each write, {n} writes (ms):")
    print(f"  p50 {ms(shared, 50):.1f}, p99 {ms(shared, 99):.1f}; alone, just before: ", end="")
    print(f"p50 {ms(alone, 50):.1f}, p99 {ms(alone, 99):.1f} ({ms(shared, 50) / ms(alone, 50):.2f}x p50)")
    print(f"  views brought up to date: {refreshes}, of them re-read whole: {rereads}")
    results.add(
        "shared",
        rows=rows,
        writes=n,
        p50_ms=ms(shared, 50),
        p99_ms=ms(shared, 99),
        alone_p50_ms=ms(alone, 50),
        refreshes=refreshes,
        rereads=rereads,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=1000, help="rows in the reference store")
    ap.add_argument("--large", type=int, default=100_000, help="rows in the large store")
    ap.add_argument("--single", type=int, default=300, help="single remember calls per store size")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--http-writes", type=int, default=100, help="remembers per HTTP client")
    ap.add_argument("--minilm-single", type=int, default=30)
    ap.add_argument("--minilm-rows", type=int, default=1000)
    ap.add_argument("--bulk-rows", type=int, default=100_000)
    ap.add_argument("--fragment-writes", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--shared-writes", type=int, default=200, help="writes while another store writes too")
    ap.add_argument("--only", action="append", choices=("single", "shared", "http", "minilm", "bulk", "fragments"))
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="engram-bench-wp-"))
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"cores: {os.cpu_count()}; args: {json.dumps(vars(args))}", flush=True)
    want = set(args.only or ("single", "shared", "http", "minilm", "bulk", "fragments"))
    results = Results("write_path", args)
    try:
        if "single" in want:
            bench_single(results, root, args.small, args.large, args.single)
        if "shared" in want:
            bench_shared(results, root, args.large, args.shared_writes)
        if "http" in want:
            bench_http(results, root, args.clients, args.http_writes)
        if "bulk" in want:
            bench_bulk(results, root, args.bulk_rows)
        if "minilm" in want:
            bench_minilm(results, root, args.minilm_single, args.minilm_rows)
        if "fragments" in want:
            bench_fragments(results, root, args.fragment_writes, args.queries)
    finally:
        results.save()  # the sections that ran, also when a later one failed
        shutil.rmtree(root, ignore_errors=True)
        print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
