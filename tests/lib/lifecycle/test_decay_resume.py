"""A decay run SIGKILLed at any commit boundary and then resumed reports the whole run: the same processed,
updated, stale and pruned counts as an uninterrupted twin, over the same end state (real child processes)."""

from __future__ import annotations

import json
import random
import shutil
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.constants import SEED_POLICY
from tests.lib.store_procs import fork_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
COUNTS = ("processed", "updated", "stale", "pruned", "skipped_concurrent_edit")
KILLS = 12


@pytest.fixture
def settings() -> Settings:
    """Pruning by score and age is the `seed` retention policy's; the worker processes use it too."""
    return Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **SEED_POLICY})


def seeded(uri: str, settings: Settings) -> MemoryStore:
    store = MemoryStore.open(uri, settings=settings)
    rows = []
    for i in range(36):
        days = (0.2, 6, 12, 45, 90, 200)[i % 6]  # fresh, fading, stale, prunable
        content = f"note {i} about topic {'pqrstu'[i % 6]} number {i * 13}"
        row = store.engine.new_row("a", content, tier="ltm", created_at=NOW - timedelta(days=days), access_count=i % 4)
        if i % 9 == 0:
            row["status"] = "stale"  # already stale: re-scoring it must not count it as newly stale
        row["vector"] = store.engine.embed([content])[0].tolist()
        rows.append(row)
    assert len(store.engine.insert_rows(rows)) == len(rows)
    return store


def decay_in_child(uri: str, kill_at: int, out: Path) -> tuple[int | None, dict[str, Any] | None]:
    env = {"ENGRAM_TEST_KILL_AT": str(kill_at), "ENGRAM_TEST_OUT": str(out)}
    proc = fork_worker("decay", uri, "a", NOW.isoformat(), "5", env=env)
    proc.join(60)
    return proc.exitcode, json.loads(out.read_text()) if out.exists() else None


def state(store: MemoryStore) -> dict[str, Any]:
    cols = ("importance", "status", "decayed_at", "content")
    return {r["id"]: {c: r[c] for c in cols} for r in store.engine.scan("a").to_pylist()}


def test_a_resumed_decay_reports_the_whole_run(tmp_path: Path, settings: Settings) -> None:
    base = str(tmp_path / "base")
    seeded(base, settings)
    twin_uri = str(tmp_path / "twin")
    shutil.copytree(base, twin_uri)
    code, twin = decay_in_child(twin_uri, -1, tmp_path / "twin.json")
    assert code == 0 and twin is not None
    assert twin["pruned"] > 0 and twin["stale"] > 0 and twin["updated"] > twin["stale"]
    expected = state(MemoryStore.open(twin_uri, settings=settings))
    ticks = int(twin["ticks"])

    for n, kill_at in enumerate(sorted(random.Random(7).sample(range(1, ticks + 1), min(KILLS, ticks)))):
        uri = str(tmp_path / f"k{n}")
        shutil.copytree(base, uri)
        code, _ = decay_in_child(uri, kill_at, tmp_path / f"k{n}.json")
        assert code == -signal.SIGKILL, (kill_at, code)
        store = MemoryStore.open(uri, settings=settings)
        saved = store.engine.get_cursor("ltm_decay", "a") or {}
        if saved.get("done"):  # killed after the run finished (giving back its lease): its cursor has the totals
            counts = {k: saved[f"total_{k}"] for k in COUNTS}
        else:
            report = decay_importance(store, "a", now=NOW, batch_size=5)  # a saved cursor's now wins
            counts = {k: getattr(report, k) for k in COUNTS}
        assert counts == {k: twin[k] for k in COUNTS}, kill_at
        assert state(store) == expected, kill_at
        assert store.engine.audit_for_agent("a", actions=["prune"]).num_rows == twin["pruned"], kill_at
        shutil.rmtree(uri)
