"""What a side table's fragments and versions cost as its commits go on: the access log a server appends to
once a second.

A server with steady reads appends to ``access_log`` once a second (``engram_pipeline/api/access.py``): a
fragment and a version each. Every read of the log (``pending_access``, which ``get`` overlays on the row it
reads) visits its fragments and lists its versions, and until the appends kept them bounded only a fold
compacted them (every 5 minutes when promotion is scheduled, never when it is not), keeping a week of versions.
The appends now go through the same bound as the other side tables' commits
(``maintenance.FragmentBound``: a compaction past ``SIDE_MAX_FRAGMENTS``, a clean-up of old versions every
``CLEAN_EVERY``).

Two stores take the same ``--appends`` one-row access-log appends (the recorder's flush), alternated: one as
the store runs (``bounded``) and one with the bound turned off (``unbounded``, the reference, measured in the
same run). At each checkpoint it prints, for both, the p50 of the last appends and of a ``pending_access``
read after each, the fragments and versions of the log, and the ratio of the two stores.

    python bench/bench_side_versions.py                    # 3,000 appends (50 minutes of a server's flushes)
    python bench/bench_side_versions.py --appends 1000     # quick (``make bench``)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import open_store  # noqa: E402
from results import Results  # noqa: E402

from engram_pipeline.store import (
    MemoryStore,  # noqa: E402
    versions,  # noqa: E402
)
from engram_pipeline.store.maintenance import FragmentBound  # noqa: E402


def append_and_read(store: MemoryStore, row: dict[str, object], timings: dict[str, list[float]]) -> None:
    t = time.perf_counter()
    store.engine.log_access([row])
    timings["append"].append(time.perf_counter() - t)
    t = time.perf_counter()
    store.engine.pending_access("a")
    timings["read"].append(time.perf_counter() - t)


class _Unbounded(FragmentBound):
    """The reference's bound: none (every append leaves its fragment and its version)."""

    def wrote(self) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=3000, help="one-row access-log appends per store")
    parser.add_argument("--every", type=int, default=0, help="appends between checkpoints (default: a fifth)")
    args = parser.parse_args()
    every = args.every or max(1, args.appends // 5)
    results = Results("side_versions", args)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    rules = f"CLEAN_EVERY {versions.CLEAN_EVERY}, KEEP_VERSIONS {versions.KEEP_VERSIONS}"
    print(f"cores: {os.cpu_count()}; appends: {args.appends}; {rules}")
    root = Path(tempfile.mkdtemp(prefix="engram-side-versions-"))
    stores = {"bounded": open_store(root, "bounded", "hashing"), "unbounded": open_store(root, "unbounded", "hashing")}
    unbounded = stores["unbounded"].engine.shards[0].access_log
    unbounded.bound = _Unbounded(unbounded.table)
    # This loop appends far faster than a server's once a second: versions younger than VERSIONS_MIN_AGE (10 s)
    # would be thousands here against 10 there, so the clean-up keeps only the last KEEP_VERSIONS, as a
    # server's does.
    versions.VERSIONS_MIN_AGE = timedelta(0)
    rows = {name: s.remember("a", "the fact that is read").memory for name, s in stores.items()}
    timings: dict[str, dict[str, list[float]]] = {name: {"append": [], "read": []} for name in stores}
    head = f"{'appends':>8} {'store':>10} {'append p50 ms':>14} {'read p50 ms':>12} {'fragments':>10} {'versions':>9}"
    print(head)
    for n in range(1, args.appends + 1):
        for name, store in stores.items():  # alternated, so both see the same machine
            append_and_read(store, rows[name], timings[name])
        if n % every == 0:
            p50 = {}
            for name, store in stores.items():
                t, log = timings[name], store.engine.shards[0].access_log.table
                p50[name] = (float(np.median(t["append"][-every:])), float(np.median(t["read"][-every:])))
                frags, kept = log.stats()["fragment_stats"]["num_fragments"], len(log.list_versions())
                print(
                    f"{n:>8} {name:>10} {p50[name][0] * 1e3:>14.2f} {p50[name][1] * 1e3:>12.2f} {frags:>10} {kept:>9}"
                )
                results.add(
                    "checkpoints",
                    appends=n,
                    store=name,
                    append_p50_ms=p50[name][0] * 1e3,
                    read_p50_ms=p50[name][1] * 1e3,
                    fragments=frags,
                    versions=kept,
                )
            ratio = [p50["bounded"][k] / p50["unbounded"][k] for k in (0, 1)]
            print(f"{'':>8} {'ratio':>10} {ratio[0]:>13.2f}x {ratio[1]:>11.2f}x", flush=True)
            results.add("ratios", appends=n, append_p50=ratio[0], read_p50=ratio[1])  # bounded / unbounded
    results.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
