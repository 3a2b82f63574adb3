"""The cost of opening the store on object storage, against a worker's kept store (issue 38).

Starts the local cluster (``deploy/local_cluster.py``: needs ``scripts/install_cluster.sh``'s packages) under a
temporary directory, makes a store on Ceph RGW at each shard count, and times ``MemoryStore.open`` (what every
run paid before) against ``assets.resources.shared_store`` (what a worker pays from its second run on: one read
of ``meta``); stops the cluster at the end. Not in ``run_all.py``: it needs the cluster.

    .venv/bin/python bench/bench_open_store.py --shards 1 4 --repeats 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from results import Results  # noqa: E402

from assets.resources import shared_store  # noqa: E402
from deploy.local_cluster import Cluster  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402


def seconds(fn: Callable[..., object], *args: object, **kwargs: object) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = Results("open_store", args)
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="engram-open-"))).start()
    try:
        for shards in args.shards:
            env = {**cluster.env(f"open-{shards}"), "ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(shards)}
            settings = Settings.from_env(env)
            MemoryStore.open(settings=settings).remember("alice", "Tea at five")  # make the store
            opened = [seconds(MemoryStore.open, settings=settings) for _ in range(args.repeats)]
            first = seconds(shared_store, "", settings)
            kept = [seconds(shared_store, "", settings) for _ in range(args.repeats)]
            print(
                f"{shards} shard(s): MemoryStore.open {', '.join(f'{s:.2f}' for s in opened)} s; "
                f"shared_store first {first:.2f} s, then {', '.join(f'{s:.3f}' for s in kept)} s",
                flush=True,
            )
            results.add(
                "opens",
                shards=shards,
                memory_store_open_s=[round(s, 4) for s in opened],
                shared_store_first_s=first,
                shared_store_kept_s=[round(s, 4) for s in kept],
            )
    finally:
        cluster.stop()
    results.save()


if __name__ == "__main__":
    main()
