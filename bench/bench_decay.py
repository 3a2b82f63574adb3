"""Benchmark the importance-decay pass against the original server's row-at-a-time write loop.

    python bench/bench_decay.py --rows 1000000          # full run (target: < 60 s, >= 50x the reference)
    python bench/bench_decay.py                          # quick run (200k rows, 5k reference sample)

Data: one agent with ``--rows`` memories written straight into the ``memories`` table as Arrow batches
(random float32 vectors of the store's dimension, so the table is as heavy as a real one); content from a pool
of templates with and without decision / problem / milestone cues; 1% pinned, 3% tagged important; access
counts roughly geometric; ages mixed so that a realistic share turns stale and a small share is pruned (rows
a tail last touched 17-30 days ago). Every row carries the importance it had one day
earlier, so the pass is the daily re-score: nearly every row changes.

Measured in one run:
(a) ``decay_importance`` end to end (read, score, batched compare-and-set writes, audited prunes),
    ``--repeats`` times, each on the freshly built table (the table is reset by restoring its built version);
    the median is quoted;
(b) the reference, as the original memory server does it: walk the rows in pages of 100 (``limit/offset``),
    score each row, and write each change with its own conditional update
    (``table.update(where="id = '..' AND version = ..", values=...)``, one commit per row), on the first
    ``--ref-sample`` rows of the same table, extrapolated to rows per second.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from results import Results  # noqa: E402

from engram_pipeline.lifecycle.decay import decay_importance  # noqa: E402
from engram_pipeline.scoring import importance_frame, importance_of  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402
from engram_pipeline.store.sql import lit  # noqa: E402

AGENT = "bench-agent"
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
TEMPLATES = [
    "User prefers dark mode in the editor",
    "The deploy script lives in tools/deploy.sh",
    "We decided to use Postgres for the event store",
    "Build failed with a linker error on arm64",
    "Shipped version 2.3 of the mobile app",
    "Standup moved to 10am on Tuesdays",
    "Customer reported a bug in CSV export",
    "Team agreed on two-week sprints",
    "Meeting notes: roadmap review with design",
    "The staging database password rotates monthly",
]


def build(store: MemoryStore, rows: int, *, seed: int = 7, chunk: int = 100_000) -> None:
    """Write ``rows`` memories of one agent as Arrow batches (one ``add`` per chunk)."""
    rng = np.random.default_rng(seed)
    schema = store.engine.memory_schema
    dim = store.embedder.dimension
    yesterday = NOW - timedelta(days=1)
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        ids = [uuid.UUID(bytes=rng.bytes(16)).hex for _ in range(n)]
        pick = rng.integers(0, len(TEMPLATES), n)
        content = [f"{TEMPLATES[p]} (#{start + i})" for i, p in enumerate(pick)]
        # Age since the last touch, in days: mostly recent, a stale band, and an old untouched tail.
        band = rng.random(n)
        touched = np.where(
            band < 0.70, rng.uniform(0, 4, n), np.where(band < 0.96, rng.uniform(4, 17, n), rng.uniform(17, 30, n))
        )
        # Accessed rows were created earlier (up to 60 days before their last access); the others are aged
        # from creation.
        accessed = rng.random(n) < 0.6
        created_days = touched + np.where(accessed, rng.uniform(0, 60, n), 0.0)
        access = np.where(accessed, rng.geometric(0.3, n), 0)
        created = [NOW - timedelta(days=float(d)) for d in created_days]
        last = [NOW - timedelta(days=float(t)) if a else None for t, a in zip(touched, accessed, strict=True)]
        pinned = rng.random(n) < 0.01
        tags = [["important"] if r < 0.03 else [] for r in rng.random(n)]
        vectors = rng.standard_normal((n, dim), dtype=np.float32)
        cols = {
            "id": ids,
            "agent_id": [AGENT] * n,
            "tier": ["ltm"] * n,
            "kind": ["semantic"] * n,
            "content": content,
            "content_hash": ids,  # unique per row; the hash itself plays no part in decay
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
            "tags": tags,
            "source": ["agent"] * n,
            "confidence": np.full(n, 0.72),
            "access_count": access.astype(np.int64),
            "reinforcement_count": np.zeros(n, dtype=np.int64),
            "pinned": pinned,
            "contradiction_with": [[] for _ in range(n)],
            "created_at": created,
            "updated_at": [yesterday] * n,
            "last_accessed_at": last,
            "version": np.ones(n, dtype=np.int64),
            "metadata": ["{}"] * n,
        }
        # Yesterday's run left each row with yesterday's score and status.
        prior = importance_frame(
            pl.DataFrame(
                {k: cols[k] for k in ("content", "tags", "pinned", "access_count", "created_at")}
            ).with_columns(pl.Series("last_accessed_at", last, dtype=pl.Datetime("us", "UTC"))),
            now=yesterday,
            half_life_days=store.settings.importance_half_life_days,
        )
        cols["importance"] = prior["importance"].to_numpy()
        cols["importance_factors"] = prior["importance_factors"].to_list()
        cols["status"] = np.where(
            prior["importance"].to_numpy() <= store.settings.stale_threshold, "stale", "active"
        ).tolist()
        arrays = [pa.array(cols[f.name], type=f.type) if f.name in cols else pa.nulls(n, f.type) for f in schema]
        store.engine.memories.add(pa.Table.from_arrays(arrays, schema=schema))


def reference(store: MemoryStore, sample: int, settings: Settings) -> tuple[int, int, float]:
    """The original loop: pages of 100 rows, one conditional ``update`` (one commit) per changed row."""
    table = store.engine.memories
    cols = [
        "id",
        "version",
        "content",
        "tags",
        "pinned",
        "access_count",
        "created_at",
        "last_accessed_at",
        "importance",
        "status",
        "created_at",
    ]
    cutoff = NOW - timedelta(days=settings.prune_older_than_days)
    seen = written = 0
    start = time.perf_counter()
    for offset in range(0, sample, 100):
        page = (
            table.search()
            .where(f"agent_id = {lit(AGENT)}")
            .select(list(dict.fromkeys(cols)))
            .limit(100)
            .offset(offset)
            .to_arrow()
            .to_pylist()
        )
        for row in page:
            seen += 1
            score, factors = importance_of(row, now=NOW, half_life_days=settings.importance_half_life_days)
            status = row["status"]
            if status in ("active", "stale"):
                status = "stale" if score <= settings.stale_threshold else "active"
            if score < settings.prune_threshold and row["created_at"] < cutoff and not row["pinned"]:
                table.delete(f"id = {lit(row['id'])} AND version = {int(row['version'])}")
                written += 1
                continue
            if score == row["importance"] and status == row["status"]:
                continue
            table.update(
                where=f"id = {lit(row['id'])} AND version = {int(row['version'])}",
                values={
                    "importance": score,
                    "importance_factors": factors,
                    "status": status,
                    "decayed_at": NOW,
                    "version": int(row["version"]) + 1,
                },
            )
            written += 1
    return seen, written, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--ref-sample", type=int, default=None, help="rows for the reference (default 20k at 1M)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=None, help="MEMORY_DECAY_BATCH_SIZE (default: settings)")
    ap.add_argument("--dir", default=None, help="where to build the store (default: a temporary directory)")
    args = ap.parse_args()
    sample = args.ref_sample or min(20_000, max(1_000, args.rows // 40))
    results = Results("decay", args)

    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing"})
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = MemoryStore.open(str(Path(tmp) / "store"), settings=settings)
        t0 = time.perf_counter()
        build(store, args.rows)
        build_s = time.perf_counter() - t0
        print(f"build: {args.rows} rows in {build_s:.1f} s (not part of the timings)")
        results.add("build", rows=args.rows, seconds=build_s)
        built = store.engine.memories.version

        times = []
        for run in range(args.repeats):
            store.engine.memories.restore(built)
            t0 = time.perf_counter()
            report = decay_importance(store, AGENT, now=NOW, batch_size=args.batch_size)
            times.append(time.perf_counter() - t0)
            print(
                f"pass {run + 1}: {times[-1]:.1f} s  processed={report.processed} updated={report.updated} "
                f"stale={report.stale} pruned={report.pruned} skipped={report.skipped_concurrent_edit} "
                f"batches={report.cursor['batches']}"
            )
            results.add(
                "passes",
                seconds=times[-1],
                processed=report.processed,
                updated=report.updated,
                stale=report.stale,
                pruned=report.pruned,
                skipped=report.skipped_concurrent_edit,
                batches=report.cursor["batches"],
            )
        median = statistics.median(times)
        rate = args.rows / median

        store.engine.memories.restore(built)
        seen, written, ref_t = reference(store, sample, settings)
        ref_rate = seen / ref_t
        print(f"reference: {seen} rows ({written} writes) in {ref_t:.1f} s")

        print()
        print(f"decay pass, median of {len(times)}: {median:.1f} s for {args.rows} rows = {rate:,.0f} rows/s")
        print(
            f"reference (row-at-a-time CAS, {sample} sample): {ref_rate:,.0f} rows/s "
            f"-> {args.rows / ref_rate:,.0f} s extrapolated to {args.rows} rows"
        )
        print(f"ratio: {rate / ref_rate:,.1f}x   (target >= 50x; 1M target < 60 s on 2 cores)")
        results.add("reference", rows=seen, writes=written, seconds=ref_t, rows_per_s=ref_rate, sample=sample)
        results.add(
            "decay_pass",
            rows=args.rows,
            repeats=len(times),
            median_s=median,
            rows_per_s=rate,
            reference_extrapolated_s=args.rows / ref_rate,
            ratio_to_reference=rate / ref_rate,
        )
    results.save()


if __name__ == "__main__":
    main()
