"""Maintenance yields to writers: with real processes committing compare-and-set batches on every row the whole
time, ``maintain`` finishes without raising, says what it had to skip, and no writer loses an update."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest

from engram_pipeline.model import rows_to_table
from engram_pipeline.store import MemoryStore
from engram_pipeline.store import maintenance as maint
from tests.lib.store_procs import fork_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WRITERS = 3
SECONDS = 8.0
FRAGMENTS, FRAGMENT = 40, 400


def test_maintain_under_concurrent_writers_never_fails(
    store: MemoryStore, store_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # many fragments of real rows: compaction is a long Rewrite that the writers' updates keep preempting
    vectors = store.engine.embed([f"row {i}" for i in range(FRAGMENT)]).tolist()
    for k in range(FRAGMENTS):
        rows = [store.engine.new_row("a", f"fragment {k} row {i} about the service") for i in range(FRAGMENT)]
        for row, vector in zip(rows, vectors, strict=True):
            row["vector"] = vector
        store.engine.memories.add(rows_to_table(rows, store.engine.memory_schema))
    go = tmp_path / "go"
    outs = [tmp_path / f"w{k}.json" for k in range(WRITERS)]
    procs = [
        fork_worker(
            "write", store_uri, "a", str(SECONDS), "40", env={"ENGRAM_TEST_GO": str(go), "ENGRAM_TEST_OUT": str(o)}
        )
        for o in outs
    ]
    start = store.engine.memories.version
    go.touch()
    while store.engine.memories.version < start + 10:  # the writers are busy
        time.sleep(0.05)
    monkeypatch.setattr(maint, "CONFLICT_BUDGET_S", 2.0)  # keep the test short
    # Before: "RuntimeError: lance error: Retryable commit conflict for version N: This Rewrite transaction was
    # preempted by concurrent transaction Update ..." once its six retries were spent.
    reports = []
    while any(p.is_alive() for p in procs):
        reports.append(store.maintain())
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    applied = sum(json.loads(o.read_text())["applied"] for o in outs)
    total = sum(
        r["reinforcement_count"] or 0 for r in store.engine.scan("a", columns=["reinforcement_count"]).to_pylist()
    )
    assert total == applied  # every acknowledged write is there once compaction is done
    assert any(r.retries > 0 or r.skipped for r in reports)  # it met the writers
    assert all(name in maint.TABLES for r in reports for name, _ in r.skipped)
    # once the writers stop, maintenance gets everything done
    time.sleep(0.6)
    quiet = store.maintain(keep=timedelta(seconds=0.5))
    assert quiet.skipped == ()
    assert quiet.versions_after["memories"] < quiet.versions_before["memories"]
