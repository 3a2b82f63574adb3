"""Side tables stay compact between maintenance runs: a pass that writes a cursor per agent, or audit events
per batch, does not leave one fragment per commit for every later read to visit."""

from __future__ import annotations

import pytest

from engram_pipeline.store import MemoryStore
from engram_pipeline.store.maintenance import SIDE_CHECK_EVERY, SIDE_MAX_FRAGMENTS


def fragments(table: object) -> int:
    return int(table.stats()["fragment_stats"]["num_fragments"])  # type: ignore[attr-defined]


def test_cursor_and_audit_writes_keep_their_tables_compact(store: MemoryStore) -> None:
    if store.shard_count != 1:
        pytest.skip("reaches the one shard's tables directly; routing is test_shards' business")
    writes = 4 * SIDE_MAX_FRAGMENTS
    for n in range(writes):
        store.set_cursor("ltm_decay", f"agent-{n}", {"after": str(n), "done": True})
        store.audit.record([{"memory_id": f"m{n}", "agent_id": f"agent-{n}", "action": "prune"}], actor="test")
    bound = SIDE_MAX_FRAGMENTS + SIDE_CHECK_EVERY
    assert fragments(store.cursors.table) <= bound
    assert fragments(store.audit.table) <= bound
    # nothing lost to the compactions
    assert all(store.get_cursor("ltm_decay", f"agent-{n}") == {"after": str(n), "done": True} for n in range(writes))
    assert store.audit.table.count_rows() == writes
