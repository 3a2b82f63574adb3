"""Liveness and readiness probes, and ``DELETE /v1/memories/{id}`` (versioned, audited, restorable)."""

from __future__ import annotations

from typing import Any

import pytest
from api_helpers import ALICE, BOB, HeldLoad
from fastapi.testclient import TestClient

from engram_pipeline.api import create_app
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore


def test_probes_after_the_lifespan_warm_up(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "detail": None}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert client.app.state.engram.ready  # type: ignore[attr-defined]


def test_not_ready_before_the_store_is_open(settings: Settings) -> None:
    app = create_app(settings=settings.replace(db_uri="memory://"))
    raw = TestClient(app)  # no `with`: the lifespan never ran, the store is not open
    assert raw.get("/healthz").status_code == 200
    r = raw.get("/readyz")
    assert r.status_code == 503 and "store is not open" in r.json()["detail"]


def test_not_ready_while_the_embedder_cannot_load(api_store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(texts: Any) -> Any:
        raise RuntimeError("embedding endpoint unreachable")

    monkeypatch.setattr(api_store.embedder, "embed", broken)
    with TestClient(create_app(api_store, access_interval_s=0)) as c:
        r = c.get("/readyz")
        assert r.status_code == 503 and "embedding endpoint unreachable" in r.json()["detail"]
        monkeypatch.undo()
        assert c.get("/readyz").status_code == 200  # retried once the embedder works


def test_the_server_answers_while_the_embedder_loads(api_store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lifespan loads the embedder in the background (MiniLM takes seconds): routes answer meanwhile, and
    the server is ready once the load is done."""
    held = HeldLoad(api_store.embedder.embed)
    monkeypatch.setattr(api_store.embedder, "embed", held)
    with TestClient(create_app(api_store, access_interval_s=0)) as c:
        assert held.loading.wait(10) and not held.returned.is_set()  # serving, while the warm-up is held
        assert c.get("/healthz").status_code == 200
        assert c.get("/v1/agents/nobody/health", headers=ALICE).status_code == 403  # a route that embeds nothing
        assert not c.app.state.engram.ready  # type: ignore[attr-defined]
        held.loaded.set()
        assert c.get("/readyz").status_code == 200  # waits for the warm-up under way


def test_delete_is_versioned_audited_and_restorable(client: TestClient, api_store: MemoryStore) -> None:
    mid = client.post("/v1/memories", json={"agent_id": "alice", "content": "User likes tea"}, headers=ALICE).json()
    mid = mid["memory"]["id"]
    client.patch(f"/v1/memories/{mid}", json={"expected_version": 1, "importance": 0.9}, headers=ALICE)
    assert client.delete(f"/v1/memories/{mid}", headers=ALICE).status_code == 422  # expected_version required
    assert client.delete(f"/v1/memories/{mid}?expected_version=2", headers=BOB).status_code == 404  # no oracle
    stale = client.delete(f"/v1/memories/{mid}?expected_version=1", headers=ALICE)
    assert stale.status_code == 409 and stale.json()["current_version"] == 2
    assert api_store.get(mid, track_access=False)["version"] == 2  # nothing was deleted

    gone = client.delete(f"/v1/memories/{mid}?expected_version=2", headers=ALICE)
    assert gone.status_code == 200, gone.text
    assert gone.json() == {"id": mid, "agent_id": "alice", "version": 2, "deleted": True}
    assert client.get(f"/v1/memories/{mid}", headers=ALICE).status_code == 404
    assert client.delete(f"/v1/memories/{mid}?expected_version=2", headers=ALICE).status_code == 404
    deletes = [e for e in api_store.audit_events(mid) if e["action"] == "delete"]
    assert len(deletes) == 1 and deletes[0]["actor"] == "api:alice-key"

    back = client.post(f"/v1/memories/{mid}/restore", headers=ALICE)
    assert back.status_code == 200 and back.json()["importance"] == 0.9 and back.json()["version"] == 3


def test_corpus_merge_dry_run_says_would_merge(client: TestClient, api_store: MemoryStore) -> None:
    from api_helpers import ADMIN

    api_store.remember("alice", "User prefers tea")
    r = client.post("/v1/agents/alice/corpus-merge", headers=ADMIN)
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert report["dry_run"] is True and "would_merge" in report and "merged" not in report
