"""Deferred access bookkeeping: many reads fold into one version-checked commit that never bumps version."""

from __future__ import annotations

from engram_pipeline.api.access import AccessRecorder
from engram_pipeline.store import MemoryStore


def test_deferred_flush_counts_every_read_in_one_commit(store: MemoryStore) -> None:
    a = store.remember("alice", "User prefers dark mode").memory
    b = store.remember("alice", "User drinks green tea").memory
    recorder = AccessRecorder(store, interval_s=60)  # long interval: only stop() flushes
    recorder.start()
    versions = len(store.memories.list_versions())
    for _ in range(3):
        recorder.record([a])
    recorder.record([a, b])
    assert len(store.memories.list_versions()) == versions  # nothing written yet
    recorder.stop()
    rows = {r["id"]: r for r in store.get_many([a["id"], b["id"]])}
    assert rows[a["id"]]["access_count"] == 4 and rows[b["id"]]["access_count"] == 1
    assert rows[a["id"]]["version"] == 1 and rows[a["id"]]["last_accessed_at"] is not None
    assert recorder.commits == 2  # one commit per distinct count (4 and 1), not one per read


def test_flush_skips_rows_edited_since_the_read(store: MemoryStore) -> None:
    a = store.remember("alice", "The build uses make").memory
    recorder = AccessRecorder(store, interval_s=60)
    recorder.start()
    recorder.record([a])
    store.update(a["id"], expected_version=1, pinned=True)
    recorder.stop()
    row = store.get(a["id"], track_access=False)
    assert row["access_count"] == 0 and row["version"] == 2 and row["pinned"] is True


def test_not_started_records_inline(store: MemoryStore) -> None:
    a = store.remember("alice", "Deploys happen on Fridays").memory
    AccessRecorder(store, interval_s=1).record([a])
    assert store.get(a["id"], track_access=False)["access_count"] == 1
