"""MemoryStore: remember, exact dedup, get, versioned update, delete, restore, listing, maintenance."""

from __future__ import annotations

import re

import pytest

from engram_pipeline.embed import HashingEmbedder
from engram_pipeline.settings import Settings
from engram_pipeline.store import (
    EmbedderMismatch,
    InvalidInput,
    MemoryNotFound,
    MemoryStore,
    NothingToRestore,
    VersionConflict,
)

VOLATILE = {"version", "updated_at", "write_token"}


def same_row(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in VOLATILE} == {
        k: v for k, v in b.items() if k not in VOLATILE
    }


def test_remember_creates_row_with_schema_defaults(store: MemoryStore) -> None:
    result = store.remember("alice", "User prefers dark mode", tags=["ui", "ui"], source="user")
    row = result.memory
    assert result.outcome == "created"
    assert row["version"] == 1 and row["status"] == "active" and row["tier"] == "ltm"
    assert row["tags"] == ["ui"] and row["confidence"] == pytest.approx(0.9)
    assert len(row["vector"]) == store.embedder.dimension


def test_exact_duplicate_returns_existing_row_untouched(store: MemoryStore) -> None:
    first = store.remember("alice", "User prefers dark mode").memory
    again = store.remember("alice", "  user PREFERS dark   mode ")
    assert again.outcome == "exact_duplicate"
    assert again.memory == first
    assert store.get(first["id"], track_access=False) == first
    assert len(store.list_memories("alice")) == 1
    # The same content for another agent is another memory.
    assert store.remember("bob", "User prefers dark mode").outcome == "created"


def test_auto_tier_routes_time_bound_content_to_stm(store: MemoryStore) -> None:
    stm = store.remember("alice", "Meeting with Dana today at 3pm").memory
    ltm = store.remember("alice", "Dana is the team lead").memory
    ttl = store.remember("alice", "Build cache is warm", ttl_s=60).memory
    assert (stm["tier"], ltm["tier"], ttl["tier"]) == ("stm", "ltm", "stm")
    assert stm["expires_at"] is not None and ltm["expires_at"] is None
    assert store.remember("alice", "Pinned fact for today", tier="ltm").memory["tier"] == "ltm"


def test_get_counts_access_without_bumping_version(store: MemoryStore) -> None:
    mid = store.remember("alice", "The deploy key rotates monthly").memory["id"]
    store.get(mid)
    store.get(mid)
    row = store.get(mid, track_access=False)
    assert row["access_count"] == 2 and row["version"] == 1 and row["last_accessed_at"] is not None


def test_update_is_compare_and_set(store: MemoryStore) -> None:
    mid = store.remember("alice", "User prefers vim").memory["id"]
    updated = store.update(mid, expected_version=1, content="User prefers emacs", tags=["editor"])
    assert updated["version"] == 2 and updated["content"] == "User prefers emacs"
    with pytest.raises(VersionConflict) as err:
        store.update(mid, expected_version=1, importance=0.9)
    assert err.value.current == 2 and err.value.expected == 1
    assert store.get(mid, track_access=False)["importance"] == updated["importance"]
    assert [e["action"] for e in store.audit_events(mid)] == ["update"]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"status": "archived"}, "cannot update status"),
        ({"importance": 2.0}, "importance must be within"),
        ({"content": ""}, "content must be a non-empty"),
        ({}, "nothing to update"),
    ],
)
def test_update_rejects_bad_input_and_writes_nothing(store: MemoryStore, changes: dict, message: str) -> None:
    row = store.remember("alice", "User prefers vim").memory
    with pytest.raises(InvalidInput, match=message):
        store.update(row["id"], expected_version=1, **changes)
    assert store.get(row["id"], track_access=False) == row


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"content": ""}, "content must be a non-empty"),
        ({"content": "x" * 20_000}, "the limit is"),
        ({"content": "ok", "kind": "dream"}, "kind must be one of"),
        ({"content": "ok", "tags": "notalist"}, "tags must be a list"),
        ({"content": "ok", "vector": [0.1, 0.2]}, "dimension 2"),
        ({"content": "ok", "confidence": -1}, "confidence must be within"),
    ],
)
def test_remember_rejects_bad_input(store: MemoryStore, kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        store.remember("alice", **kwargs)
    assert store.engine.memories.count_rows() == 0


def test_get_missing_and_cross_agent(store: MemoryStore) -> None:
    mid = store.remember("alice", "Secret of alice").memory["id"]
    with pytest.raises(MemoryNotFound):
        store.get("nope")
    with pytest.raises(MemoryNotFound):
        store.get(mid, agent_id="bob")


def test_delete_then_restore_round_trip(store: MemoryStore) -> None:
    row = store.remember("alice", "The staging DB is on port 5433", tags=["infra"]).memory
    store.delete(row["id"], expected_version=1)
    with pytest.raises(MemoryNotFound):
        store.get(row["id"])
    back = store.restore(row["id"])
    assert same_row(back, row) and back["version"] > row["version"]
    with pytest.raises(VersionConflict):
        store.delete(row["id"], expected_version=1)


def test_restore_superseded_row_from_pre_image(store: MemoryStore) -> None:
    from engram_pipeline.store.marks import mark_superseded

    old = store.remember("alice", "User lives in Berlin").memory
    new = store.remember("alice", "Completely different memory about tea").memory
    assert mark_superseded(store.engine, old, by=new["id"], reason="test", actor="test")
    hidden = store.get(old["id"], track_access=False)
    assert hidden["status"] == "superseded" and hidden["superseded_by"] == new["id"]
    assert old["id"] not in [h.memory["id"] for h in store.recall("alice", "Berlin", k=5)]
    back = store.restore(old["id"])
    assert same_row(back, old) and back["version"] == hidden["version"] + 1
    assert old["id"] in [h.memory["id"] for h in store.recall("alice", "Berlin", k=5)]


def test_restore_without_pre_image_is_refused(store: MemoryStore) -> None:
    mid = store.remember("alice", "Nothing happened to me").memory["id"]
    with pytest.raises(NothingToRestore):
        store.restore(mid)


def test_list_filters(store: MemoryStore) -> None:
    store.remember("alice", "Episode one went fine", kind="episodic", outcome="success", tags=["ops"])
    store.remember("alice", "Fact about tea", tags=["food"])
    store.remember("bob", "Bob's fact", tags=["ops"])
    assert [r["content"] for r in store.list_memories("alice", kind="episodic")] == ["Episode one went fine"]
    assert [r["content"] for r in store.list_memories("alice", tag="ops")] == ["Episode one went fine"]
    assert len(store.list_memories("alice", status="active")) == 2
    assert store.agents() == ["alice", "bob"]


def test_store_refuses_a_mismatched_embedder(store_uri: str, settings: Settings) -> None:
    MemoryStore.open(store_uri, settings=settings).remember("alice", "hello there")
    with pytest.raises(EmbedderMismatch, match="hashing-384"):
        MemoryStore.open(store_uri, settings=settings, embedder=HashingEmbedder(dim=64))


def test_memory_uri_and_reopen(store_uri: str, settings: Settings) -> None:
    mem = MemoryStore.open("memory://", settings=settings)
    assert mem.remember("a", "in memory").outcome == "created"
    first = MemoryStore.open(store_uri, settings=settings)
    mid = first.remember("a", "persisted").memory["id"]
    assert MemoryStore.open(store_uri, settings=settings).get(mid)["content"] == "persisted"


def test_maintenance_compacts_and_keeps_rows(store: MemoryStore) -> None:
    for i in range(12):
        store.remember("alice", f"memory number {i} about topic {i * 7}")
    report = store.maintain()
    assert report.retries >= 0 and set(report.tables) >= {"memories", "audit"}
    assert len(store.list_memories("alice")) == 12


def test_plans_and_cursors(store: MemoryStore) -> None:
    pid = store.engine.save_plan("alice", {"clusters": [{"canonical": "a", "members": []}]})
    assert store.engine.latest_plan("alice")["plan_id"] == pid
    store.engine.mark_plan_applied(pid, {"merged": 0})
    assert store.engine.get_plan(pid)["status"] == "applied"
    store.engine.set_cursor("decay", "alice", {"after": "x"})
    store.engine.set_cursor("decay", "alice", {"after": "y"})
    assert store.engine.get_cursor("decay", "alice") == {"after": "y"}
    assert store.engine.get_cursor("decay", "bob") is None


@pytest.mark.parametrize("built_with", [{"ENGRAM_EMBEDDER": "minilm"}, {"ENGRAM_HASHING_DIM": "64"}])
def test_the_mismatch_error_names_settings_that_open_the_store(store_uri: str, built_with: dict[str, str]) -> None:
    """Following the error's advice opens the store (it once said ENGRAM_EMBEDDER='all-MiniLM-L6-v2', which
    is refused as an unknown embedder)."""
    if built_with.get("ENGRAM_EMBEDDER") == "minilm":
        pytest.importorskip("sentence_transformers")
    MemoryStore.open(store_uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **built_with}))
    with pytest.raises(EmbedderMismatch) as refused:
        MemoryStore.open(store_uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    advice = re.search(r"Set ((?:ENGRAM_\w+=\S+ ?)+),", str(refused.value))
    assert advice, str(refused.value)
    env = dict(pair.split("=", 1) for pair in advice.group(1).split())
    assert env == {"ENGRAM_EMBEDDER": "hashing", **built_with}
    MemoryStore.open(store_uri, settings=Settings.from_env(env))
