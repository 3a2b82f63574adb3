"""Object-store requests of a read through the store's own table handle against a second, public async handle.

    python bench/bench_async_handles.py                       # 200 rounds on 2,000 rows, own cluster
    python bench/bench_async_handles.py --cluster-dir DIR     # a running `make cluster` (CLUSTER_DIR) instead

Issue 37 asked for the write path on lancedb's public async API (``lancedb.connect_async``). The store's reads
go through :mod:`engram_pipeline.store.one_trip` instead, which runs lancedb's ``AsyncTable`` coroutines on the
handle the synchronous table already holds (``table._table``). This measures what a second handle would cost.
Both handles open one table on the Ceph RGW, through a counting proxy (``bench/s3_counter.py``), with the
store's own read consistency (``read_consistency_interval=0``: every read checks the latest version). Each
round makes one write through the synchronous handle (a one-row append, as ``remember`` makes), then the same
filtered read twice: through that handle's own async table (``one_trip.read``) and through the table of a
``connect_async`` connection. It prints the requests of each read, by operation, per round, and their medians.
The load is printed first; a read's time is the median without the proxy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import lancedb  # noqa: E402
from lancedb.index import BTree  # noqa: E402
from results import Results  # noqa: E402
from s3_counter import CountingProxy  # noqa: E402

from engram_pipeline.store import one_trip  # noqa: E402

WAYS = ("own handle", "second async handle")


def _rows(start: int, n: int) -> list[dict[str, Any]]:
    return [{"id": f"r{i:06d}", "agent_id": f"agent-{i % 10}", "n": i} for i in range(start, start + n)]


def rounds(uri: str, options: dict[str, str], args: argparse.Namespace, take: Any) -> dict[str, list[Any]]:
    """``args.rounds`` rounds of a write and the two reads; ``take()`` after each step (counts or seconds)."""
    db = lancedb.connect(uri, read_consistency_interval=timedelta(0), storage_options=options)
    table = db.create_table("t", _rows(0, args.rows))
    for column in ("id", "agent_id"):  # indexed as the store's memories are
        table.create_index(column, config=BTree(), replace=True)

    async def second() -> Any:
        conn = await lancedb.connect_async(uri, read_consistency_interval=timedelta(0), storage_options=options)
        return await conn.open_table("t")

    other = one_trip.run(second())  # on lancedb's own loop, as one_trip's reads run
    where = "agent_id = 'agent-3'"

    async def read_other() -> Any:
        return await other.query().where(where).select(["id", "n"]).to_arrow()

    out: dict[str, list[Any]] = {way: [] for way in WAYS}
    take()
    for r in range(args.rounds):
        table.add(_rows(args.rows + r, 1))
        take()
        own = one_trip.read(table, where, columns=["id", "n"])
        out["own handle"].append(take())
        theirs = one_trip.run(read_other())
        out["second async handle"].append(take())
        assert own.num_rows == theirs.num_rows, (own.num_rows, theirs.num_rows)  # both see the new row
    return out


class _Stopwatch:
    """Seconds since the last call (what ``rounds`` takes after each step when nothing counts requests)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def __call__(self) -> float:
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--cluster-dir", type=Path, help="a running local cluster's directory (else start one)")
    args = parser.parse_args()
    print(f"load: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    results = Results("async_handles", args)

    from deploy.local_cluster import Cluster

    with tempfile.TemporaryDirectory(prefix="bench-handles-") as tmp:
        cluster = Cluster.load(args.cluster_dir) if args.cluster_dir else Cluster(Path(tmp) / "cluster").start()
        try:
            options = cluster.storage_options
            timed = rounds(f"s3://engram/handles-{uuid.uuid4().hex[:8]}", options, args, _Stopwatch())
            with CountingProxy(options["aws_endpoint"]) as proxy:
                counted = rounds(
                    f"s3://engram/handles-{uuid.uuid4().hex[:8]}",
                    {**options, "aws_endpoint": proxy.endpoint},
                    args,
                    proxy.take,
                )
        finally:
            if not args.cluster_dir:
                cluster.stop()

    print(f"{args.rounds} rounds on {args.rows:,} rows: a one-row append, then one filtered read each way")
    print(f"{'read through':<20} {'requests':>9} {'ms p50':>7}  by operation (medians per read)")
    for way in WAYS:
        per_op: Counter[str] = Counter()
        ops = {op for c in counted[way] for op in c["ops"]}
        for op in ops:
            per_op[op] = statistics.median(c["ops"].get(op, 0) for c in counted[way])
        total = statistics.median(c["total"] for c in counted[way])
        ms = statistics.median(timed[way]) * 1000
        shown = " ".join(f"{op} {n:g}" for op, n in sorted(per_op.items(), key=lambda kv: -kv[1]))
        print(f"{way:<20} {total:>9g} {ms:>7.1f}  {shown}")
        results.add(way.replace(" ", "_"), requests_p50=total, ms_p50=ms, ops_p50=dict(per_op))
    results.save()


if __name__ == "__main__":
    main()
