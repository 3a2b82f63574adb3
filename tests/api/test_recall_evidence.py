"""Recall over HTTP carries a derived hit's archived evidence (the retention policy's consolidated episodes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api_helpers import ALICE
from fastapi.testclient import TestClient

from engram_pipeline.lifecycle.consolidation import consolidate
from engram_pipeline.store import MemoryStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_recall_returns_the_evidence_of_a_derived_hit(client: TestClient, api_store: MemoryStore) -> None:
    texts = ("User lives in Berlin", "The user lives in Berlin.", "User lives in Berlin now")
    ids = {
        api_store.remember("alice", t, kind="episodic", created_at=T0 - timedelta(days=90), confidence=0.3).memory["id"]
        for t in texts
    }
    assert consolidate(api_store, "alice", scope="full", now=T0).archived == 3
    body = {"agent_id": "alice", "query": "where does the user live", "k": 2}
    r = client.post("/v1/memories/recall", json=body, headers=ALICE)
    assert r.status_code == 200, r.text
    [belief] = [h for h in r.json()["data"] if h["memory"]["source"] == "derived"]
    assert {e["id"] for e in belief["evidence"]} == ids
    assert all(e["status"] == "archived" and "vector" not in e for e in belief["evidence"])
    none = client.post("/v1/memories/recall", json={**body, "evidence": 0}, headers=ALICE).json()
    assert all(h["evidence"] == [] for h in none["data"])
    assert client.post("/v1/memories/recall", json={**body, "evidence": 11}, headers=ALICE).status_code == 422
