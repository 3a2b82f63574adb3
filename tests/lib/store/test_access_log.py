"""The access log: reads are appended there, never written onto memory rows, and folded in by the passes.

The fold is version-checked and never bumps ``version``; two folds racing over the same entries apply each
once; reads logged while a fold runs wait for the next one; a dead fold's claims are dropped, not applied.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from engram_pipeline.importer import export_rows
from engram_pipeline.lifecycle.health import health
from engram_pipeline.lifecycle.promotion import promote_stm
from engram_pipeline.model import utcnow
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.maintenance import MAX_VECTOR_SEGMENTS
from tests.stores import pre_row_versions


def versions(table: Any) -> int:
    return len(table.list_versions())


def distinct_rows(store: MemoryStore, n: int, agent_id: str = "alice") -> list[dict[str, Any]]:
    """``n`` rows with random vectors, inserted without write-time dedup (similar texts would collapse)."""
    rng = np.random.default_rng(n)
    rows = [store.engine.new_row(agent_id, f"note {i}") for i in range(n)]
    for r in rows:
        r["vector"] = rng.normal(size=store.embedder.dimension).tolist()
    assert store.engine.insert_rows(rows) == [r["id"] for r in rows]
    return rows


def test_recall_and_get_log_reads_and_leave_memory_rows_alone(store: MemoryStore) -> None:
    a = store.remember("alice", "User prefers dark mode").memory
    before = versions(store.engine.memories)
    store.recall("alice", "dark mode", k=1)
    store.get(a["id"])
    assert versions(store.engine.memories) == before  # no fragment for the index to miss
    seen = store.get(a["id"], track_access=False)  # overlays the two logged reads
    assert seen["access_count"] == 2 and seen["version"] == 1 and seen["last_accessed_at"] is not None
    assert store.engine.memories.search().where(f"id = '{a['id']}'").to_list()[0]["access_count"] == 0
    assert health(store, "alice").never_recalled_share == 0.0
    assert [r["access_count"] for r in export_rows(store, ["alice"])] == [2]


def test_fold_applies_once_without_bumping_version(store: MemoryStore) -> None:
    a = store.remember("alice", "The build uses make").memory
    b = store.remember("alice", "Deploys happen on Fridays").memory
    store.engine.log_access([a, b])
    store.engine.log_access([a], times=3)
    fold = store.engine.fold_access("alice")
    assert (fold.entries, fold.rows, fold.applied) == (3, 2, 2)
    rows = {r["id"]: r for r in store.get_many([a["id"], b["id"]])}
    assert (rows[a["id"]]["access_count"], rows[b["id"]]["access_count"]) == (4, 1)
    assert {r["version"] for r in rows.values()} == {1}
    assert store.engine.access_log.table.count_rows() == 0
    log_versions = versions(store.engine.access_log.table)
    assert store.engine.fold_access("alice").entries == 0
    assert versions(store.engine.access_log.table) == log_versions  # an idle fold commits nothing


def test_fold_is_scoped_to_its_agent(store: MemoryStore) -> None:
    a = store.remember("alice", "User prefers dark mode").memory
    b = store.remember("bob", "User prefers light mode").memory
    store.engine.log_access([a, b])
    assert store.engine.fold_access("alice").applied == 1
    assert store.engine.pending_access().to_dicts()[0]["id"] == b["id"]
    assert store.get(b["id"], track_access=False)["access_count"] == 1  # still pending, overlaid


def test_racing_folds_apply_each_read_once(store_uri: str, settings: Settings) -> None:
    store = MemoryStore.open(store_uri, settings=settings)
    rows = distinct_rows(store, 20)
    for _ in range(5):
        store.engine.log_access(rows)
    handles = [MemoryStore.open(store_uri, settings=settings) for _ in range(3)]
    start = threading.Barrier(len(handles))
    folds: list[Any] = []

    def fold(h: MemoryStore) -> None:
        start.wait()
        folds.append(h.engine.fold_access("alice"))

    threads = [threading.Thread(target=fold, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(f.entries for f in folds) == 100
    counts = [r["access_count"] for r in store.get_many([r["id"] for r in rows])]
    assert counts == [5] * 20 and store.engine.access_log.table.count_rows() == 0  # every row the same: order is moot


def test_reads_logged_during_a_fold_wait_for_the_next(store: MemoryStore, monkeypatch: Any) -> None:
    a = store.remember("alice", "The build uses make").memory
    store.engine.log_access([a])
    apply = store.engine.record_access

    def read_meanwhile(rows: Any, **kw: Any) -> int:
        store.engine.log_access([a])  # an API flush landing between the claim and the delete
        return apply(rows, **kw)

    monkeypatch.setattr(store.engine, "record_access", read_meanwhile)
    assert store.engine.fold_access("alice").entries == 1
    monkeypatch.undo()
    assert store.engine.pending_access("alice")["times"].to_list() == [1]
    store.engine.fold_access("alice")
    assert store.get(a["id"], track_access=False)["access_count"] == 2


def test_a_dead_folds_claims_are_dropped_not_applied(store: MemoryStore) -> None:
    a = store.remember("alice", "The build uses make").memory
    store.engine.log_access([a])
    store.engine.access_log.table.update(where="true", values_sql={"claimed_by": "'dead'", "claimed_at": "now()"})
    assert store.engine.fold_access("alice").dropped_stale_claims == 0  # still fresh: maybe a live fold
    fold = store.engine.fold_access("alice", now=utcnow() + timedelta(hours=2))
    assert (fold.dropped_stale_claims, fold.applied) == (1, 0)
    assert (
        store.engine.access_log.table.count_rows() == 0 and store.get(a["id"], track_access=False)["access_count"] == 0
    )


def test_promotion_and_maintenance_fold_the_log(store: MemoryStore) -> None:
    stm = store.remember("alice", "We decided to deploy on Fridays", tier="stm").memory
    for _ in range(3):
        store.get(stm["id"])
    assert promote_stm(store, "alice").promoted == 1
    row = store.get(stm["id"], track_access=False)
    assert row["tier"] == "ltm" and row["access_count"] == 3
    store.get(stm["id"])
    report = store.maintain()
    assert report.accesses_folded == 1 and store.engine.access_log.table.count_rows() == 0


def test_a_fold_leaves_the_rows_it_counts_in_the_vector_index(store_uri: str, settings: Settings) -> None:
    """``memories`` has stable row ids: an update that leaves the vector alone keeps its row indexed."""
    store = MemoryStore.open(store_uri, settings=settings.replace(vector_index_min_rows=256, index_refresh_rows=100))
    rows = distinct_rows(store, 300)
    store.maintain()
    store.engine.log_access(rows[:200])
    fold = store.engine.fold_access("alice")
    assert fold.applied == 200 and not fold.reindexed
    assert store.engine.memories.index_stats("vector_idx").num_unindexed_rows == 0


def test_fold_refreshes_the_vector_index_past_the_limit(store_uri: str, settings: Settings) -> None:
    """In a table made before stable row ids, each row a fold counts leaves the vector index."""
    if settings.shards != 1:
        pytest.skip("the table of a one-shard store")
    pre_row_versions(store_uri, settings.hashing_dim)
    store = MemoryStore.open(store_uri, settings=settings.replace(vector_index_min_rows=256, index_refresh_rows=100))
    rows = distinct_rows(store, 300)
    store.maintain()
    assert store.engine.memories.index_stats("vector_idx").num_unindexed_rows == 0
    store.engine.log_access(rows[:50])
    fold = store.engine.fold_access("alice")  # 50 rows rewritten: under the limit, left to maintenance
    assert not fold.reindexed and store.engine.memories.index_stats("vector_idx").num_unindexed_rows == 50
    store.engine.log_access(rows[50:200])
    assert store.engine.fold_access("alice").reindexed
    assert store.engine.memories.index_stats("vector_idx").num_unindexed_rows == 0


def test_maintenance_rebuilds_an_index_split_by_refreshes(store_uri: str, settings: Settings) -> None:
    """Folds split the index as they re-index the rows they rewrote, in a table made before stable row ids."""
    if settings.shards != 1:
        pytest.skip("the table of a one-shard store")
    pre_row_versions(store_uri, settings.hashing_dim)
    store = MemoryStore.open(store_uri, settings=settings.replace(vector_index_min_rows=256, index_refresh_rows=1))
    rows = distinct_rows(store, 300)
    store.maintain()
    for start in range(0, 10 * 20, 20):  # ten folds, each re-indexing the rows it rewrote
        store.engine.log_access(rows[start : start + 20])
        assert store.engine.fold_access("alice").reindexed
    assert store.engine.memories.index_stats("vector_idx").num_indices > MAX_VECTOR_SEGMENTS
    assert "vector" in store.maintain().indexes
    stats = store.engine.memories.index_stats("vector_idx")
    assert (stats.num_indices, stats.num_unindexed_rows) == (1, 0)
    assert store.engine.memories.stats()["fragment_stats"]["num_fragments"] == 1
    count = {r["id"]: r["access_count"] for r in store.get_many([r["id"] for r in rows])}
    assert [count[r["id"]] for r in rows] == [1] * 200 + [0] * 100
