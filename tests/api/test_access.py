"""Deferred access logging: many reads become one append to the access log, and nothing in ``memories``."""

from __future__ import annotations

from engram_pipeline.api.access import AccessRecorder
from engram_pipeline.store import MemoryStore


def test_deferred_flush_logs_every_read_in_one_append(store: MemoryStore) -> None:
    a = store.remember("alice", "User prefers dark mode").memory
    b = store.remember("alice", "User drinks green tea").memory
    recorder = AccessRecorder(store, interval_s=60)  # long interval: only stop() flushes
    recorder.start()
    log_versions = len(store.engine.access_log.table.list_versions())
    for _ in range(3):
        recorder.record([a])
    recorder.record([a, b])
    assert len(store.engine.access_log.table.list_versions()) == log_versions  # nothing written yet
    memory_versions = len(store.engine.memories.list_versions())
    recorder.stop()
    assert recorder.commits == 1 and len(store.engine.access_log.table.list_versions()) == log_versions + 1
    assert len(store.engine.memories.list_versions()) == memory_versions  # reads never rewrite memory rows
    pending = {r["id"]: r["times"] for r in store.engine.pending_access("alice").to_dicts()}
    assert pending == {a["id"]: 4, b["id"]: 1}
    store.engine.fold_access("alice")
    rows = {r["id"]: r for r in store.get_many([a["id"], b["id"]])}
    assert rows[a["id"]]["access_count"] == 4 and rows[b["id"]]["access_count"] == 1
    assert rows[a["id"]]["version"] == 1 and rows[a["id"]]["last_accessed_at"] is not None


def test_reads_of_a_row_edited_since_are_dropped_at_the_fold(store: MemoryStore) -> None:
    a = store.remember("alice", "The build uses make").memory
    recorder = AccessRecorder(store, interval_s=60)
    recorder.start()
    recorder.record([a])
    store.update(a["id"], expected_version=1, pinned=True)
    recorder.stop()
    assert store.engine.fold_access("alice").applied == 0
    row = store.get(a["id"], track_access=False)
    assert row["access_count"] == 0 and row["version"] == 2 and row["pinned"] is True


def test_not_started_logs_inline(store: MemoryStore) -> None:
    a = store.remember("alice", "Deploys happen on Fridays").memory
    AccessRecorder(store, interval_s=1).record([a])
    assert store.get(a["id"], track_access=False)["access_count"] == 1  # get overlays what is not folded yet
