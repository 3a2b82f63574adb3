"""Where the time of one single ``remember`` goes (hashing embedder, local LanceDB directory, one client).

    python bench/profile_remember.py --rows 1000 --rows 10000 --writes 100 [--cprofile 30]

For each store size: a store filled and maintained as ``bench_write_path.py`` fills it, then ``--writes``
single writes, each timed end to end and split into spans by wrapping the write path's steps (embedding, row
building, the batch's first reads: the table version, the exact-duplicate lookup and the neighbour search, in
one trip since they were put there; the judge and contradiction checks, the Lance append, the self-compaction
check, the stored-row conversion; what is left is the group commit and Python glue). A step a write did not
call is not printed (code older than the one trip shows the three reads as spans of their own). Then the
floor: a bare ``table.add`` of one row of the same schema to a table in the same directory, timed the same
number of times, and the same append onto ``memories`` itself (its manifest, its indexes). ``--cprofile N``
prints the top of a cProfile of N more writes, sorted by cumulative time; ``--filled DIR`` copies a store
filled before instead of filling one (one ``--rows``).

The spans are medians of per-write sums (a span a write skipped counts 0); they are what the write path
spent, nested spans not subtracted, so their sum can exceed the total only where one holds another.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import open_store, texts  # noqa: E402
from bench_write_path import AGENTS, fill  # noqa: E402

from engram_pipeline.model import rows_to_table  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402
from engram_pipeline.store.core import ShardedEngine  # noqa: E402
from engram_pipeline.store.write import batch, insert, reads  # noqa: E402
from engram_pipeline.store.write.cache import WriteCache  # noqa: E402

SPANS: dict[str, float] = defaultdict(float)


def spanned(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPANS[name] += time.perf_counter() - t

    return wrapper


def instrument() -> None:
    """Wrap the steps of the write path (module attributes, so the callers' look-ups find the wrappers)."""
    store_cls = ShardedEngine
    store_cls.new_row = spanned("build row", store_cls.new_row)  # type: ignore[method-assign]
    store_cls.shard_versions = spanned("table version read", store_cls.shard_versions)  # type: ignore[method-assign]
    store_cls._drop_lost_races = spanned("race re-read", store_cls._drop_lost_races)  # type: ignore[method-assign]
    store_cls.get = spanned("re-read (get)", store_cls.get)  # type: ignore[method-assign]
    for module, attr, name in (
        (batch, "_embed_missing", "embed"),
        (batch, "first_reads", "version + exact lookup + neighbours"),  # one trip (store/one_trip.py)
        (reads, "neighbours_of", "neighbour search"),
        (batch, "_check", "judge + contradiction checks"),
        (batch, "append_new", "insert (append + its checks)"),
        (batch, "after_commit", "self-compaction check"),
        (batch, "apply_contradictions", "contradiction writes"),
        (batch, "remember_batch", "batch (inside the group commit)"),
    ):
        setattr(module, attr, spanned(name, getattr(module, attr)))
    insert.with_retry = spanned("lance append commit", insert.with_retry)  # only append_new calls it
    WriteCache.views = spanned("write cache: version check, refresh, load", WriteCache.views)  # type: ignore[method-assign]
    # the group commit captured remember_batch in a lambda over the module global: it sees the wrapper


def profile_size(root: Path, rows: int, writes: int, cprof: int, filled: Path | None = None) -> None:
    if filled is not None:  # a copy of a store filled before (by this script's fill), to skip the fill
        shutil.copytree(filled, root / f"p-{rows}")
        os.sync()  # the copy's writeback would otherwise slow the commits timed next
    store = open_store(root, f"p-{rows}", "hashing")
    if filled is None:
        fill(store, rows, seed=rows)
    # warm the process (first query plans, imports, each agent's view in the write cache) outside the figures
    for i, text in enumerate(texts(AGENTS, seed=rows + 7)):
        store.remember(f"agent-{i % AGENTS}", text, tier="ltm")
    loads, refreshes, rereads = (
        store.engine.write_cache.loads,
        store.engine.write_cache.refreshes,
        store.engine.write_cache.rereads,
    )
    per_write: list[dict[str, float]] = []
    totals = []
    for i, text in enumerate(texts(writes, seed=rows + 1)):
        SPANS.clear()
        t = time.perf_counter()
        store.remember(f"agent-{i % AGENTS}", text, tier="ltm")
        totals.append(time.perf_counter() - t)
        per_write.append(dict(SPANS))
    names = sorted({n for w in per_write for n in w}, key=lambda n: -np.median([w.get(n, 0) for w in per_write]))
    total = np.asarray(totals) * 1000
    p50, p99 = np.median(total), np.percentile(total, 99)
    print(f"\n{rows} rows, {writes} single writes: total p50 {p50:.2f} ms, p99 {p99:.2f}")
    print(f"  {'span':<34} {'p50 ms':>8} {'mean ms':>8} {'calls/write':>12}")
    for n in names:
        vals = np.asarray([w.get(n, 0.0) for w in per_write]) * 1000
        share = sum(1 for w in per_write if n in w) / len(per_write)
        print(f"  {n:<34} {np.median(vals):>8.2f} {vals.mean():>8.2f} {share:>12.2f}")
    cache = store.engine.write_cache
    loads, refreshes, rereads = cache.loads - loads, cache.refreshes - refreshes, cache.rereads - rereads
    print(
        f"  write cache during them: {loads} agents loaded, {refreshes} views refreshed "
        f"({rereads} of them by reading their (id, version) whole)"
    )
    if cprof:
        prof = cProfile.Profile()
        prof.enable()
        for i, text in enumerate(texts(cprof, seed=rows + 3)):
            store.remember(f"agent-{i % AGENTS}", text, tier="ltm")
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(45)
        print(out.getvalue())
    floor(store, root, writes)  # last: its rows add fragments to memories


def floor(store: MemoryStore, root: Path, n: int) -> None:
    """A bare one-row ``table.add``: to a fresh table of the same schema in the same directory, and to
    ``memories`` itself (rows of an agent no write uses)."""
    row = store.engine.new_row("floor-agent", "floor row")
    row["vector"] = store.engine.embed(["floor row"])[0].tolist()
    scratch = store.engine.db.create_table(f"floor_{time.monotonic_ns()}", schema=store.engine.memory_schema)
    out = {}
    for name, table in (("fresh table", scratch), ("memories", store.engine.memories)):
        took = []
        for i in range(n):
            one = rows_to_table(
                [{**row, "id": f"floor-{name[0]}-{i}", "content_hash": f"f{i}"}], store.engine.memory_schema
            )
            t = time.perf_counter()
            table.add(one)
            took.append(time.perf_counter() - t)
        out[name] = np.asarray(took) * 1000
    for name, took in out.items():
        p50, p99 = np.median(took), np.percentile(took, 99)
        print(f"  bare table.add of one row, {name:<12} p50 {p50:.2f} ms, p99 {p99:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, action="append", help="store sizes (default 1000 and 10000)")
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--cprofile", type=int, default=0, help="writes under cProfile after the spans (0: none)")
    ap.add_argument("--filled", type=Path, help="a store of --rows rows (one size) to copy instead of filling one")
    args = ap.parse_args()
    instrument()
    root = Path(tempfile.mkdtemp(prefix="engram-prof-"))
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    try:
        for rows in args.rows or [1000, 10000]:
            profile_size(root, rows, args.writes, args.cprofile, args.filled)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
