"""Side tables stay compact between maintenance runs: a pass that writes a cursor per agent, or audit events
per batch, does not leave one fragment per commit for every later read to visit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store import versions as version_rules
from engram_pipeline.store.maintenance import SIDE_CHECK_EVERY, SIDE_MAX_FRAGMENTS


def fragments(table: object) -> int:
    return int(table.stats()["fragment_stats"]["num_fragments"])  # type: ignore[attr-defined]


def test_cursor_and_audit_writes_keep_their_tables_compact(store: MemoryStore) -> None:
    if store.shard_count != 1:
        pytest.skip("reaches the one shard's tables directly; routing is test_shards' business")
    writes = 4 * SIDE_MAX_FRAGMENTS
    for n in range(writes):
        store.engine.set_cursor("ltm_decay", f"agent-{n}", {"after": str(n), "done": True})
        store.engine.audit.record([{"memory_id": f"m{n}", "agent_id": f"agent-{n}", "action": "prune"}], actor="test")
    bound = SIDE_MAX_FRAGMENTS + SIDE_CHECK_EVERY
    assert fragments(store.engine.cursors.table) <= bound
    assert fragments(store.engine.audit.table) <= bound
    # nothing lost to the compactions
    assert all(
        store.engine.get_cursor("ltm_decay", f"agent-{n}") == {"after": str(n), "done": True} for n in range(writes)
    )
    assert store.engine.audit.table.count_rows() == writes


def versions(table: object) -> int:
    return len(table.list_versions())  # type: ignore[attr-defined]


def test_side_tables_and_the_access_log_clean_up_their_old_versions(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every CLEAN_EVERY commits a side table (here ``cursors``) and the access log remove their versions but
    the last KEEP_VERSIONS (and those younger than VERSIONS_MIN_AGE), as ``memories`` does: each read lists
    them, and a compaction keeps a week of them. The access log's appends keep its fragments bounded too (a
    server appends once a second, and only a fold compacted it)."""
    if store.shard_count != 1:
        pytest.skip("reaches the one shard's tables directly; routing is test_shards' business")
    monkeypatch.setattr(version_rules, "CLEAN_EVERY", 16)
    monkeypatch.setattr(version_rules, "KEEP_VERSIONS", 8)
    monkeypatch.setattr(version_rules, "VERSIONS_MIN_AGE", timedelta(0))
    row = store.remember("a", "the fact that is read").memory
    writes = 80
    for n in range(writes):
        store.engine.set_cursor("ltm_decay", f"agent-{n}", {"after": str(n), "done": True})
        store.engine.log_access([row])
    # 8 kept, at most 15 commits since the last clean-up, and a compaction's commit or two among them
    assert versions(store.engine.cursors.table) <= 8 + 16 + 2
    assert versions(store.engine.shards[0].access_log.table) <= 8 + 16 + 2
    assert fragments(store.engine.shards[0].access_log.table) <= SIDE_MAX_FRAGMENTS + SIDE_CHECK_EVERY
    assert all(
        store.engine.get_cursor("ltm_decay", f"agent-{n}") == {"after": str(n), "done": True} for n in range(writes)
    )
    assert int(store.engine.pending_access("a")["times"].sum()) == writes


def test_an_in_memory_table_has_no_versions_to_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version_rules, "CLEAN_EVERY", 2)
    store = MemoryStore.open("memory://", settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    for n in range(4):
        store.engine.set_cursor("ltm_decay", f"agent-{n}", {"after": str(n)})
    assert not version_rules.clean_old_versions(store.engine.cursors.table)
    assert store.engine.get_cursor("ltm_decay", "agent-3") == {"after": "3"}
