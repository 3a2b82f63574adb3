"""Routes of /v1/memories: success, 401, 403, 404, 409 and 422 each where it applies; nothing written on error."""

from __future__ import annotations

import pyarrow as pa
import pytest
from api_helpers import ADMIN, ALICE, BOB
from fastapi.testclient import TestClient

from engram_pipeline.api.models import MemoryOut
from engram_pipeline.model import memory_schema
from engram_pipeline.store import MemoryStore


def remember(client: TestClient, content: str, agent: str = "alice", headers: dict | None = None, **kw):
    return client.post("/v1/memories", json={"agent_id": agent, "content": content, **kw}, headers=headers or ALICE)


def count(store: MemoryStore) -> int:
    return store.engine.memories.count_rows()


def test_memory_out_mirrors_the_arrow_schema() -> None:
    columns = {f.name for f in memory_schema(8)}
    assert set(MemoryOut.model_fields) == columns - {"vector", "write_token"}


def test_remember_created_then_duplicates(client: TestClient, api_store: MemoryStore) -> None:
    r = remember(client, "User prefers dark mode", tags=["ui"])
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["outcome"] == "created" and body["memory"]["version"] == 1
    assert body["memory"]["tags"] == ["ui"] and body["memory"]["agent_id"] == "alice"
    again = remember(client, "  user PREFERS dark mode ")
    assert again.status_code == 200 and again.json()["outcome"] == "exact_duplicate"
    assert again.json()["memory"]["id"] == body["memory"]["id"]
    assert count(api_store) == 1
    audit = api_store.audit_events(body["memory"]["id"])
    assert all(e["actor"] == "api:alice-key" for e in audit)


def test_remember_reports_contradictions(client: TestClient) -> None:
    first = remember(client, "User lives in Berlin").json()["memory"]
    r = remember(client, "User lives in Munich")
    assert r.status_code == 201
    found = r.json()["contradictions"]
    assert [c["memory_id"] for c in found] == [first["id"]]
    assert client.get(f"/v1/memories/{first['id']}", headers=ALICE).json()["status"] == "contradicted"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"agent_id": "alice", "content": ""}, "content"),
        ({"agent_id": "alice", "content": "   "}, "content must be a non-empty string"),
        ({"agent_id": "alice", "content": "x" * 10_241}, "10241 bytes; the limit is 10240"),
        ({"agent_id": "alice", "content": "ok", "vector": [0.1, 0.2]}, "dimension 2"),
        ({"agent_id": "alice", "content": "ok", "colour": "red"}, "colour: unknown field"),
        ({"agent_id": "alice", "content": "ok", "importance": 1.5}, "importance"),
        ({"agent_id": "alice", "content": "ok", "kind": "dream"}, "kind"),
        ({"agent_id": "alice", "content": "ok", "pinned": "yes"}, "pinned"),
        ({"agent_id": "al\x00ice", "content": "ok"}, "agent_id"),
        ({"content": "ok"}, "agent_id: Field required"),
    ],
)
def test_remember_rejects_bad_input(client: TestClient, api_store: MemoryStore, body: dict, needle: str) -> None:
    r = client.post("/v1/memories", json=body, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"]
    assert count(api_store) == 0


def test_malformed_json_is_422_and_says_so(client: TestClient, api_store: MemoryStore) -> None:
    r = client.post(
        "/v1/memories", content=b'{"agent_id": "alice",', headers={**ALICE, "content-type": "application/json"}
    )
    assert r.status_code == 422 and "malformed JSON" in r.json()["detail"]
    assert count(api_store) == 0


def test_content_limit_is_bytes_not_characters(client: TestClient) -> None:
    assert remember(client, "é" * 5120).status_code == 201  # 10240 bytes: exactly the limit
    r = remember(client, "é" * 5121)
    assert r.status_code == 422 and "10242 bytes" in r.json()["detail"]


def test_auth_on_remember(client: TestClient, api_store: MemoryStore) -> None:
    assert client.post("/v1/memories", json={"agent_id": "alice", "content": "x"}).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    r = client.post("/v1/memories", json={"agent_id": "alice", "content": "x"}, headers=wrong)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = remember(client, "x", agent="alice", headers=BOB)
    assert r.status_code == 403 and "bob-key" in r.json()["detail"]
    assert count(api_store) == 0
    assert remember(client, "admin writes anywhere", agent="carol", headers=ADMIN).status_code == 201


def test_get_tenancy_and_not_found(client: TestClient, api_store: MemoryStore) -> None:
    mid = remember(client, "Alice's secret").json()["memory"]["id"]
    r = client.get(f"/v1/memories/{mid}", headers=ALICE)
    assert r.status_code == 200 and r.json()["content"] == "Alice's secret"
    assert api_store.get(mid, track_access=False)["access_count"] == 1  # a read is an access
    assert client.get(f"/v1/memories/{mid}", headers=BOB).status_code == 404  # not an existence oracle
    assert client.get(f"/v1/memories/{mid}").status_code == 401
    r = client.get("/v1/memories/does-not-exist", headers=ALICE)
    assert r.status_code == 404 and "does-not-exist" in r.json()["detail"]
    assert client.get("/v1/memories/a%00b", headers=ALICE).status_code == 422


def test_update_is_versioned(client: TestClient, api_store: MemoryStore) -> None:
    mid = remember(client, "The build uses make").json()["memory"]["id"]
    r = client.patch(
        f"/v1/memories/{mid}", json={"expected_version": 1, "content": "The build uses just"}, headers=ALICE
    )
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 2 and r.json()["content"] == "The build uses just"
    stale = client.patch(f"/v1/memories/{mid}", json={"expected_version": 1, "pinned": True}, headers=ALICE)
    assert stale.status_code == 409
    assert stale.json()["current_version"] == 2 and "re-read" in stale.json()["detail"]
    assert api_store.get(mid, track_access=False)["pinned"] is False
    ok = client.patch(
        f"/v1/memories/{mid}", json={"expected_version": 2, "outcome": None, "metadata": {"n": 1}}, headers=ALICE
    )
    assert ok.status_code == 200 and ok.json()["metadata"] == {"n": 1}
    events = [e for e in api_store.audit_events(mid) if e["action"] == "update"]
    assert len(events) == 2 and {e["actor"] for e in events} == {"api:alice-key"}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"pinned": True}, "expected_version: Field required"),
        ({"expected_version": 1}, "nothing to update"),
        ({"expected_version": 1, "content": None}, "content cannot be null"),
        ({"expected_version": 1, "status": "archived"}, "status: unknown field"),
        ({"expected_version": 0, "pinned": True}, "expected_version"),
        ({"expected_version": 1, "content": "y" * 20_000}, "the limit is 10240"),
    ],
)
def test_update_rejects_bad_input(client: TestClient, api_store: MemoryStore, body: dict, needle: str) -> None:
    mid = remember(client, "Original").json()["memory"]["id"]
    r = client.patch(f"/v1/memories/{mid}", json=body, headers=ALICE)
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"]
    assert api_store.get(mid, track_access=False)["version"] == 1


def test_update_auth_and_missing(client: TestClient) -> None:
    mid = remember(client, "Original").json()["memory"]["id"]
    body = {"expected_version": 1, "pinned": True}
    assert client.patch(f"/v1/memories/{mid}", json=body).status_code == 401
    assert client.patch(f"/v1/memories/{mid}", json=body, headers=BOB).status_code == 404
    assert client.patch("/v1/memories/nope", json=body, headers=ALICE).status_code == 404


def test_recall(client: TestClient, api_store: MemoryStore) -> None:
    for text in ("User prefers dark mode", "User drinks green tea", "Deploys happen on Fridays"):
        remember(client, text)
    remember(client, "Bob likes chess", agent="bob", headers=BOB)
    r = client.post("/v1/memories/recall", json={"agent_id": "alice", "query": "dark mode", "k": 2}, headers=ALICE)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == 2 == len(body["data"])
    assert body["data"][0]["memory"]["content"] == "User prefers dark mode"
    assert body["data"][0]["score"] >= body["data"][1]["score"]
    assert {h["memory"]["agent_id"] for h in body["data"]} == {"alice"}
    top = api_store.get(body["data"][0]["memory"]["id"], track_access=False)
    assert top["access_count"] == 1 and top["version"] == 1  # bookkeeping without a version bump
    vec = api_store.engine.embed(["green tea"])[0].tolist()
    r = client.post(
        "/v1/memories/recall",
        json={"agent_id": "alice", "vector": vec, "k": 1, "tiers": ["warm", "hot"]},
        headers=ALICE,
    )
    assert r.status_code == 200 and r.json()["data"][0]["memory"]["content"] == "User drinks green tea"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"agent_id": "alice", "query": "x", "k": 0}, "k: Input should be greater than or equal to 1"),
        ({"agent_id": "alice", "query": "x", "k": 101}, "k: Input should be less than or equal to 100"),
        ({"agent_id": "alice", "query": "x", "k": "5"}, "k: Input should be a valid integer"),
        ({"agent_id": "alice"}, "exactly one of query or vector"),
        ({"agent_id": "alice", "query": "x", "vector": [0.0] * 384}, "exactly one of query or vector"),
        ({"agent_id": "alice", "vector": [0.5] * 3}, "vector has dimension 3; this store uses 384"),
        ({"agent_id": "alice", "query": "x", "tiers": ["lukewarm"]}, "tiers.0"),
        ({"agent_id": "alice", "query": "x", "min_confidence": 2}, "min_confidence"),
        ({"agent_id": "alice", "query": "x", "limit": 3}, "limit: unknown field"),
    ],
)
def test_recall_rejects_bad_input(client: TestClient, body: dict, needle: str) -> None:
    r = client.post("/v1/memories/recall", json=body, headers=ALICE)
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"]


def test_recall_tenancy(client: TestClient) -> None:
    body = {"agent_id": "alice", "query": "anything"}
    assert client.post("/v1/memories/recall", json=body).status_code == 401
    assert client.post("/v1/memories/recall", json=body, headers=BOB).status_code == 403
    assert client.post("/v1/memories/recall", json=body, headers=ADMIN).json() == {"data": [], "count": 0}


def test_restore_after_delete(client: TestClient, api_store: MemoryStore) -> None:
    mid = remember(client, "Keep this").json()["memory"]["id"]
    assert client.post(f"/v1/memories/{mid}/restore", headers=ALICE).status_code == 409  # nothing to restore
    api_store.delete(mid)
    assert client.get(f"/v1/memories/{mid}", headers=ALICE).status_code == 404
    assert client.post(f"/v1/memories/{mid}/restore", headers=BOB).status_code == 404  # tenancy from the audit
    assert client.post(f"/v1/memories/{mid}/restore").status_code == 401
    r = client.post(f"/v1/memories/{mid}/restore", headers=ALICE)
    assert r.status_code == 200 and r.json()["id"] == mid and r.json()["content"] == "Keep this"
    assert client.post("/v1/memories/never-existed/restore", headers=ALICE).status_code == 404


def test_restore_of_a_row_edited_after_it_was_hidden_needs_its_current_version(
    client: TestClient, api_store: MemoryStore
) -> None:
    from engram_pipeline.store.marks import mark_superseded

    old = remember(client, "User lives in Berlin").json()["memory"]
    new = remember(client, "Completely different memory about tea").json()["memory"]
    assert mark_superseded(
        api_store.engine, api_store.get(old["id"], track_access=False), by=new["id"], reason="t", actor="t"
    )
    api_store.update(old["id"], expected_version=2, tags=["edited"])
    before = api_store.engine.memories.version
    r = client.post(f"/v1/memories/{old['id']}/restore", headers=ALICE)
    assert r.status_code == 409 and r.json()["current_version"] == 3, r.text
    assert "changed after the supersede" in r.json()["detail"]
    stale = client.post(f"/v1/memories/{old['id']}/restore", json={"expected_version": 2}, headers=ALICE)
    assert stale.status_code == 409 and stale.json()["current_version"] == 3
    assert api_store.engine.memories.version == before
    ok = client.post(f"/v1/memories/{old['id']}/restore", json={"expected_version": 3}, headers=ALICE)
    assert ok.status_code == 200 and ok.json()["status"] == "active" and ok.json()["tags"] == []
    again = client.post(f"/v1/memories/{old['id']}/restore", headers=ALICE)
    assert again.status_code == 409 and "already restored" in again.json()["detail"]


def test_other_agents_ids_answer_like_unknown_ids(client: TestClient, api_store: MemoryStore) -> None:
    """A key scoped to bob cannot tell alice's ids from ids that never existed (live, or only in the audit)."""
    live = remember(client, "Alice's live note").json()["memory"]["id"]
    gone = remember(client, "Alice's deleted note").json()["memory"]["id"]
    api_store.delete(gone)
    table_version = api_store.engine.memories.version

    def answers(mid: str) -> list[tuple[int, str]]:
        body = {"expected_version": 1, "pinned": True}
        got = [
            client.get(f"/v1/memories/{mid}", headers=BOB),
            client.patch(f"/v1/memories/{mid}", json=body, headers=BOB),
            client.post(f"/v1/memories/{mid}/restore", headers=BOB),
        ]
        return [(r.status_code, r.json()["detail"].replace(mid, "<id>")) for r in got]

    unknown = answers("never-existed")
    assert unknown == [(404, "memory '<id>' does not exist")] * 3
    assert answers(live) == unknown
    assert answers(gone) == unknown
    assert api_store.engine.memories.version == table_version  # nothing written
    assert client.get(f"/v1/memories/{live}", headers=ADMIN).status_code == 200


def test_unknown_route_and_method(client: TestClient) -> None:
    assert client.put("/v1/memories/x", headers=ALICE).status_code == 405
    assert client.get("/v1/nothing", headers=ALICE).status_code == 404
    assert isinstance(pa.schema([]), pa.Schema)
