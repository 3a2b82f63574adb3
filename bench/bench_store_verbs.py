"""``remember`` and ``recall`` latency on a populated store, with the hashing embedder.

Builds ``--rows`` rows over ``--agents`` agents (inserted in batches through ``insert_rows``), then times
``--calls`` ``remember`` calls (new content) and ``--calls`` ``recall`` calls, each ``--repeats`` times on a
fresh copy of the store, and prints the median of each. The reference measured in the same run is
``--calls`` raw LanceDB vector searches of the same texts' embeddings (what both verbs build on), so the
ratios stay comparable on a loaded machine:

    python bench/bench_store_verbs.py --rows 5000 --calls 200 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from results import Results  # bench/results.py

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

_WORDS = (
    "alpha amber anchor apple arrow autumn badge bakery banner basil beacon berry blossom border breeze bridge",
    "cabin candle canyon carbon castle cedar cellar chalk cherry cider circle cloud clover cobalt comet copper",
    "coral cotton crane crystal dawn delta desert diamond dolphin dragon dune eagle ember engine falcon fern",
)
_WORD_LIST = " ".join(_WORDS).split(" ")


def _sentence(rng: random.Random) -> str:
    return "User likes " + " ".join(rng.choice(_WORD_LIST) for _ in range(8))


def _build(path: Path, rows: int, agents: int, settings: Settings) -> None:
    store = MemoryStore.open(str(path), settings=settings)
    rng = random.Random(7)
    batch = []
    for i in range(rows):
        content = f"{_sentence(rng)} {i}"
        row = store.engine.new_row(f"agent-{i % agents}", content)
        row["vector"] = store.engine.embed([content])[0].tolist()
        batch.append(row)
        if len(batch) == 1000:
            store.engine.insert_rows(batch)
            batch = []
    store.engine.insert_rows(batch)
    store.maintain()


def _time(fn, calls: list[str]) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for text in calls:
        fn(text)
    return time.perf_counter() - start


def _raw_search(store: MemoryStore, text: str) -> None:
    vector = store.engine.embed([text])[0]
    store.engine.memories.search(vector).metric("cosine").where("agent_id = 'agent-1'", prefilter=True).limit(
        10
    ).to_arrow()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    settings = Settings().replace(embedder="hashing")
    work = Path(tempfile.mkdtemp(prefix="bench-verbs-"))
    try:
        seed = work / "seed"
        _build(seed, args.rows, args.agents, settings)
        times: dict[str, list[float]] = {"search": [], "remember": [], "recall": []}
        for n in range(args.repeats):
            copy = work / f"run-{n}"
            shutil.copytree(seed, copy)
            store = MemoryStore.open(str(copy), settings=settings)
            rng = random.Random(100 + n)
            texts = [f"{_sentence(rng)} new {n}-{i}" for i in range(args.calls)]
            times["search"].append(_time(lambda t, s=store: _raw_search(s, t), texts))
            times["remember"].append(_time(lambda t, s=store: s.remember("agent-0", t), texts))
            times["recall"].append(_time(lambda t, s=store: s.recall("agent-1", t, k=10), texts))
        median = {k: statistics.median(v) for k, v in times.items()}
        figures = {
            "rows": args.rows,
            "calls": args.calls,
            "repeats": args.repeats,
            "median_s": {k: round(v, 3) for k, v in median.items()},
            "per_call_ms": {k: round(1000 * v / args.calls, 2) for k, v in median.items()},
            "ratio_to_search": {k: round(v / median["search"], 2) for k, v in median.items() if k != "search"},
        }
        print(json.dumps(figures, indent=2))
        results = Results("store_verbs", args)
        results.add("verbs", **figures)
        results.save()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
