"""Real OS processes race compare-and-set updates and lifecycle-style batch writes on the same rows.

Each row carries a counter in ``importance_factors`` (JSON ``{"n": k}``): every successful write adds 1.
Workers count what the store told them was applied; at the end each row's counter must equal the sum of
the increments reported as applied (no successful write lost, none applied twice), and every refused write
must have been a ``VersionConflict`` or a counted ``skipped_concurrent_edit``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time

import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore, VersionConflict

ROWS = 6
SECONDS = 4.0


def _count(row: dict) -> int:
    # a new row's factors already hold its information score (engram_pipeline/information.py), without "n"
    return int(json.loads(row["importance_factors"] or "{}").get("n", 0))


def _single_writer(uri: str, ids: list[str], seed: int, out: mp.Queue) -> None:
    import random

    store = MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    rng = random.Random(seed)
    applied = {i: 0 for i in ids}
    conflicts = 0
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        mid = rng.choice(ids)
        row = store.get(mid, track_access=rng.random() < 0.3)
        try:
            store.engine.cas_write(
                [
                    {
                        "id": mid,
                        "version": row["version"],
                        "importance_factors": json.dumps({"n": _count(row) + 1}),
                    }
                ],
                actor="test",
                action="increment",
            ).applied[0]
            applied[mid] += 1
        except IndexError:
            conflicts += 1
        try:
            # An agent-style update with a stale version must be refused with VersionConflict.
            store.update(mid, expected_version=row["version"] - 1, importance=0.5) if row[
                "version"
            ] > 1 else None
        except VersionConflict:
            conflicts += 1
    out.put(("single", applied, conflicts, 0))


def _batch_writer(uri: str, ids: list[str], seed: int, out: mp.Queue) -> None:
    store = MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    applied = {i: 0 for i in ids}
    skipped = 0
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        rows = store.get_many(ids)

        def bump(fresh: list[dict]) -> list[dict]:
            return [
                {
                    "id": r["id"],
                    "version": r["version"],
                    "importance_factors": json.dumps({"n": _count(r) + 1}),
                }
                for r in fresh
            ]

        result = store.engine.cas_write(bump(rows), recompute=bump, actor="batch", action="increment")
        for mid in result.applied:
            applied[mid] += 1
        skipped += len(result.skipped_concurrent_edit)
        assert set(result.applied) | set(result.skipped_concurrent_edit) == set(ids)
    out.put(("batch", applied, 0, skipped))


@pytest.mark.integration
def test_processes_racing_cas_lose_no_write(store_uri: str, settings: Settings) -> None:
    store = MemoryStore.open(store_uri, settings=settings)
    ids = [store.remember("alice", f"contended row number {i}").memory["id"] for i in range(ROWS)]
    initial = {r["id"]: r["version"] for r in store.get_many(ids)}  # write-time checks may have bumped some
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_single_writer, args=(store_uri, ids, n, out)) for n in range(2)]
    procs += [ctx.Process(target=_batch_writer, args=(store_uri, ids, n, out)) for n in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    total = {i: sum(r[1][i] for r in results) for i in ids}
    final = {r["id"]: r for r in store.get_many(ids)}
    for mid in ids:
        assert _count(final[mid]) == total[mid], (
            f"row {mid}: counter {_count(final[mid])} != applied {total[mid]}"
        )
        assert final[mid]["version"] == initial[mid] + total[mid]
    assert sum(total.values()) > 20, "the race made too little progress to mean anything"
    refused = sum(r[2] for r in results) + sum(r[3] for r in results)
    assert refused > 0, "no write was ever refused: the processes did not really race"
