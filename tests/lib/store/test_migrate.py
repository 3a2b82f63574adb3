"""``engram migrate --shards N``: a re-shard loses nothing (row for row, in every table), resumes after a kill,
and leaves the store unusable until it finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore, MigrationInProgress, ShardCountMismatch, StoreError
from engram_pipeline.store.maintenance import TABLES
from engram_pipeline.store.migrate import migrate
from engram_pipeline.store.shards import CREATED_AT, table_name
from tests.stores import pre_row_versions

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# The columns that identify a row of each table, for sorting (the copies keep every column).
KEYS = {
    "memories": ["id"],
    "links": ["src_id", "dst_id", "rel", "run_id"],
    "audit": ["event_id"],
    "plans": ["plan_id"],
    "cursors": ["key"],
    "access_log": ["id", "version", "at"],
}


def settings(shards: int) -> Settings:
    return Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(shards)})


def build(uri: str) -> None:
    """Ten agents with links (contradictions), audit events (update, delete, restore), plans, cursors and
    leases (a decay pass), and logged reads not yet folded."""
    store = MemoryStore.open(uri, settings=settings(1))
    for n in range(10):
        agent = f"agent-{n}"
        store.remember(agent, "User lives in Berlin", created_at=T0)
        store.remember(agent, "User lives in Munich", created_at=T0 + timedelta(hours=1))
        r = store.remember(agent, f"{agent} prefers tea", tags=["drinks"], created_at=T0)
        row = store.update(r.memory["id"], expected_version=1, importance=0.9)
        store.delete(row["id"])
        store.restore(row["id"])
        store.engine.save_plan(agent, {"clusters": [n]})
        decay_importance(store, agent, now=T0 + timedelta(days=2))
        store.recall(agent, "where does the user live", k=2)
    assert store.count() == 30


def snapshot(uri: str, shards: int) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table of the store (all shards), sorted by its key columns."""
    store = MemoryStore.open(uri, settings=settings(shards))
    out: dict[str, list[dict[str, Any]]] = {}
    for base in TABLES:
        rows = [r for shard in store.engine.shards for r in shard.tables()[base].to_arrow().to_pylist()]
        out[base] = sorted(rows, key=lambda r: tuple(str(r[c]) for c in KEYS[base]))
    return out


def test_one_to_four_to_two_to_one_loses_nothing(store_uri: str) -> None:
    build(store_uri)
    before = snapshot(store_uri, 1)
    assert all(before[b] for b in ("memories", "links", "audit", "plans", "cursors", "access_log"))
    for n in (4, 2, 1):
        report = migrate(store_uri, shards=n, settings=settings(1))
        assert report.target == n and report.rows == {b: len(before[b]) for b in TABLES}
        assert snapshot(store_uri, n) == before
        store = MemoryStore.open(store_uri, settings=settings(n))
        for agent in store.agents():  # and each agent's rows are in its own shard's table only
            k = store.engine.shard_of(agent)
            assert store.engine.shards[k].memories.count_rows(f"agent_id = '{agent}'") == 3
        with pytest.raises(ShardCountMismatch):
            MemoryStore.open(store_uri, settings=settings(n + 1))
    names = sorted(p.name for p in Path(store_uri).iterdir())
    assert names == sorted([f"{b}.lance" for b in TABLES] + ["meta.lance"])  # the old layouts were dropped
    store = MemoryStore.open(store_uri, settings=settings(1))
    assert store.recall("agent-3", "prefers tea", k=1)[0].memory["content"] == "agent-3 prefers tea"


def test_a_store_made_before_stable_row_ids_gets_them(store_uri: str) -> None:
    """The copies are new tables: a migration brings an older store's ``memories`` to stable row ids, so
    its write cache catches up instead of re-reading agents."""
    pre_row_versions(store_uri, settings(1).hashing_dim)
    build(store_uri)
    assert not MemoryStore.open(store_uri, settings=settings(1)).engine.shards[0].tracks_versions
    before = snapshot(store_uri, 1)
    migrate(store_uri, shards=2, settings=settings(1))
    store = MemoryStore.open(store_uri, settings=settings(2))
    assert all(shard.tracks_versions for shard in store.engine.shards) and snapshot(store_uri, 2) == before
    store.remember("agent-1", "a fact written after the migration")
    k = store.engine.shard_of("agent-1")
    assert store.engine.shards[k].memories.count_rows(f"{CREATED_AT} > 1") == 1


def test_migrating_to_the_current_count_changes_nothing(store_uri: str) -> None:
    build(store_uri)
    versions = MemoryStore.open(store_uri, settings=settings(1)).engine.table_versions()
    report = migrate(store_uri, shards=1, settings=settings(1))
    assert (report.source, report.target, report.copied) == (1, 1, ())
    assert MemoryStore.open(store_uri, settings=settings(1)).engine.table_versions() == versions


KILLER = """
import os, signal, sys
from engram_pipeline.settings import Settings
from engram_pipeline.store.migrate import migrate

def die(k):
    if k == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)

uri, shards = sys.argv[1], int(sys.argv[2])
migrate(uri, shards=shards, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}), after_shard=die)
"""


def test_a_killed_migration_refuses_opens_and_resumes(store_uri: str) -> None:
    build(store_uri)
    before = snapshot(store_uri, 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, store_uri, "4", "1"], env=env, capture_output=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    for n in (1, 4, 2):  # half-way, no count opens it: neither layout is whole
        with pytest.raises(MigrationInProgress, match="engram migrate --shards 4"):
            MemoryStore.open(store_uri, settings=settings(n))
    with pytest.raises(StoreError, match="finish that first"):
        migrate(store_uri, shards=2, settings=settings(1))
    report = migrate(store_uri, shards=4, settings=settings(1))
    assert report.resumed and report.copied == (2, 3)  # shards 0 and 1 were done before the kill
    assert snapshot(store_uri, 4) == before


def test_an_injected_failure_between_shards_resumes(store_uri: str) -> None:
    build(store_uri)
    before = snapshot(store_uri, 1)

    def fail(k: int) -> None:
        if k == 0:
            raise RuntimeError("injected")

    with pytest.raises(RuntimeError, match="injected"):
        migrate(store_uri, shards=3, settings=settings(1), after_shard=fail)
    assert migrate(store_uri, shards=3, settings=settings(1)).copied == (1, 2)
    assert snapshot(store_uri, 3) == before


def _refused_by_a_write_mid_migration(store_uri: str) -> MemoryStore:
    """Build the store, then migrate it to 2 shards while a store opened before writes once: the migration is
    refused. Returns that writer's store."""
    build(store_uri)
    early = MemoryStore.open(store_uri, settings=settings(1))  # opened before the migration began

    def write(k: int) -> None:
        if k == 0:
            early.remember("agent-1", "A late fact written mid-migration")

    with pytest.raises(StoreError, match="written to while it was being re-sharded"):
        migrate(store_uri, shards=2, settings=settings(1), after_shard=write)
    return early


def test_a_write_during_the_migration_is_not_lost(store_uri: str) -> None:
    _early = _refused_by_a_write_mid_migration(store_uri)  # kept open, as the writer was
    report = migrate(store_uri, shards=2, settings=settings(1))  # the writer stopped: done again, from the start
    assert report.copied == (0, 1) and report.rows["memories"] == 31
    store = MemoryStore.open(store_uri, settings=settings(2))
    assert "A late fact written mid-migration" in {r["content"] for r in store.list_memories("agent-1")}
    assert {table_name("memories", k, 2) for k in range(2)} <= set(store.engine.tables())


def layout_tables(uri: str) -> list[str]:
    """The store's table directories but ``meta``."""
    return sorted(p.name.removesuffix(".lance") for p in Path(uri).iterdir() if p.name != "meta.lance")


DROP_KILLER = """
import os, signal, sys
from engram_pipeline.settings import Settings
from engram_pipeline.store.migrate import migrate

dropped = []

def die(name):
    dropped.append(name)
    if len(dropped) == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)

uri, shards = sys.argv[1], int(sys.argv[2])
migrate(uri, shards=shards, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}), after_drop=die)
"""


@pytest.mark.parametrize("drops", [1, len(TABLES) - 1])
def test_a_migration_killed_between_its_switch_and_its_last_drop_finishes_its_clean_up(
    store_uri: str, drops: int
) -> None:
    """Issue 35: the re-run saw the store at its new count and returned, leaving the old layout's tables (a
    full copy of its audit pre-images and links) on disk for good."""
    build(store_uri)
    before = snapshot(store_uri, 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", DROP_KILLER, store_uri, "2", str(drops)], env=env, capture_output=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    new_layout = sorted(table_name(b, k, 2) for b in TABLES for k in range(2))
    left = sorted(set(layout_tables(store_uri)) - set(new_layout))
    assert len(left) == len(TABLES) - drops  # switched: the store opens at 2 shards, the old tables remain
    assert snapshot(store_uri, 2) == before
    report = migrate(store_uri, shards=2, settings=settings(2))
    assert (report.source, report.target, report.copied, report.dropped) == (2, 2, (), tuple(left))
    assert layout_tables(store_uri) == new_layout
    assert snapshot(store_uri, 2) == before
    assert migrate(store_uri, shards=2, settings=settings(2)).dropped == ()  # nothing left to drop


def test_a_refused_migration_runs_once_the_writers_stopped(store_uri: str) -> None:
    """Issue 35: a writer that wrote once more between the refusal and its stop got the next run refused too
    (it compared with the versions recorded at the failed check, not with those it copied)."""
    early = _refused_by_a_write_mid_migration(store_uri)
    early.remember("agent-2", "A last fact, written before the writer stopped")
    report = migrate(store_uri, shards=2, settings=settings(1))  # the writer has stopped
    assert report.copied == (0, 1) and report.rows["memories"] == 32
    store = MemoryStore.open(store_uri, settings=settings(2))
    contents = {r["content"] for r in store.list_memories("agent-1")} | {
        r["content"] for r in store.list_memories("agent-2")
    }
    assert {"A late fact written mid-migration", "A last fact, written before the writer stopped"} <= contents
