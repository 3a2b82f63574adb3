"""Recall: visibility rules, tier and confidence filters, ranking, access bookkeeping."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engram_pipeline.model import utcnow
from engram_pipeline.store import InvalidInput, MemoryStore


def ids(hits: list) -> list[str]:
    return [h.memory["id"] for h in hits]


def test_recall_ranks_the_closest_first_and_tracks_access(store: MemoryStore) -> None:
    a = store.remember("alice", "The user prefers dark mode in every editor").memory
    store.remember("alice", "Quarterly revenue grew by ten percent")
    hits = store.recall("alice", "dark mode editor preference", k=2)
    assert ids(hits)[0] == a["id"]
    assert hits[0].score >= hits[1].score
    row = store.get(a["id"], track_access=False)
    assert row["access_count"] == 1 and row["version"] == 1


def test_superseded_archived_hidden_contradicted_visible(store: MemoryStore) -> None:
    rows = {
        name: store.remember("alice", f"memory about the {name} topic").memory
        for name in ("plain", "superseded", "archived", "contradicted", "marker")
    }
    store.engine.cas_write(
        [
            {
                "id": rows["superseded"]["id"],
                "version": 1,
                "status": "superseded",
                "superseded_by": rows["plain"]["id"],
            }
        ],
        actor="t",
        action="t",
    )
    store.engine.cas_write(
        [{"id": rows["archived"]["id"], "version": 1, "status": "archived"}], actor="t", action="t"
    )
    store.engine.cas_write(
        [{"id": rows["contradicted"]["id"], "version": 1, "status": "contradicted"}], actor="t", action="t"
    )
    # A pass that rewrote status to "stale" must not un-hide a row carrying the superseded_by marker.
    store.engine.cas_write(
        [{"id": rows["marker"]["id"], "version": 1, "status": "stale", "superseded_by": rows["plain"]["id"]}],
        actor="t",
        action="t",
    )
    seen = set(ids(store.recall("alice", "memory about the topic", k=10)))
    assert seen == {rows["plain"]["id"], rows["contradicted"]["id"]}
    seen = set(
        ids(
            store.recall(
                "alice", "memory about the topic", k=10, include_superseded=True, include_archived=True
            )
        )
    )
    assert seen == {r["id"] for r in rows.values()}


def test_expired_stm_is_hidden(store: MemoryStore) -> None:
    old = store.remember("alice", "Parking spot B12 today", created_at=utcnow() - timedelta(days=2)).memory
    assert old["tier"] == "stm"
    assert old["id"] not in ids(store.recall("alice", "parking spot", k=5))


def test_tier_and_confidence_filters(store: MemoryStore) -> None:
    hot = store.remember("alice", "fact one about coffee", confidence=0.95).memory
    warm = store.remember("alice", "fact two about coffee", confidence=0.75).memory
    cold = store.remember("alice", "fact three about coffee", confidence=0.5).memory
    assert set(ids(store.recall("alice", "coffee", tiers=["hot"]))) == {hot["id"]}
    assert set(ids(store.recall("alice", "coffee", tiers=["warm", "cold"]))) == {warm["id"], cold["id"]}
    assert set(ids(store.recall("alice", "coffee", min_confidence=0.7))) == {hot["id"], warm["id"]}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"query": "x", "k": 0}, "k must be"),
        ({"query": "x", "k": 101}, "k must be"),
        ({"query": None}, "exactly one"),
        ({"query": "x", "tiers": ["lukewarm"]}, "tiers must be"),
        ({"query": "x", "min_confidence": 1.5}, "min_confidence"),
        ({"query": None, "vector": [0.0] * 3}, "dimension 3"),
    ],
)
def test_recall_rejects_bad_input(store: MemoryStore, kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        store.recall("alice", **kwargs)


def test_recall_by_vector(store: MemoryStore) -> None:
    a = store.remember("alice", "vectors can be given directly").memory
    hits = store.recall("alice", vector=a["vector"], k=1)
    assert ids(hits) == [a["id"]] and hits[0].similarity == pytest.approx(1.0, abs=1e-5)
