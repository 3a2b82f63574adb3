"""Routes of /v1/agents/{agent_id}: health for the agent's keys, lifecycle passes for admin keys only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from api_helpers import (
    ADMIN,
    ALICE,
    BOB,
    CANONICAL,
    merged_as_reviewed,
    near_duplicate,
    reviewed_plan_then_late_duplicate,
)
from fastapi.testclient import TestClient

from engram_pipeline.model import utcnow
from engram_pipeline.store import MemoryStore


@pytest.fixture
def seeded(api_store: MemoryStore) -> MemoryStore:
    old = utcnow() - timedelta(days=90)
    for i, text in enumerate(
        [
            "User prefers dark mode in the editor",
            "User prefers dark mode in editors",
            "User prefers a dark theme in the editor",
            "Deploys happen on Fridays",
            "The build uses make",
            "Meeting with Dana today at 3pm",
        ]
    ):
        api_store.remember(
            "alice",
            text,
            created_at=old if i == 4 else None,
            importance=0.05 if i == 4 else None,
            pinned=i == 5,  # the short-term meeting note: pinned, so that it scores high enough to be promoted
        )
    return api_store


ADMIN_ROUTES = ["decay", "consolidate", "promote", "corpus-merge"]


@pytest.mark.parametrize("route", ADMIN_ROUTES)
def test_admin_routes_need_an_admin_key(client: TestClient, route: str) -> None:
    assert client.post(f"/v1/agents/alice/{route}").status_code == 401
    r = client.post(f"/v1/agents/alice/{route}", headers=ALICE)
    assert r.status_code == 403 and "not an admin key" in r.json()["detail"]


@pytest.mark.parametrize("route", ADMIN_ROUTES)
def test_admin_routes_reject_unknown_fields(client: TestClient, seeded: MemoryStore, route: str) -> None:
    # seeded: an agent with no memories is a 404 before its body is read (see the test below)
    r = client.post(f"/v1/agents/alice/{route}", json={"bogus": 1}, headers=ADMIN)
    assert r.status_code == 422


@pytest.mark.parametrize("route", ADMIN_ROUTES)
def test_passes_on_an_unknown_agent_are_not_found_and_write_nothing(
    client: TestClient, seeded: MemoryStore, route: str
) -> None:
    """A pass over an agent with no memories (a typo) answers like health does, not with an empty report."""
    r = client.post(f"/v1/agents/ghost/{route}", headers=ADMIN)
    assert r.status_code == 404 and "unknown agent 'ghost'" in r.json()["detail"], r.text
    assert seeded.engine.plans_of("ghost") == [] and not seeded.engine.has_agent("ghost")
    assert seeded.engine.audit_for_agent("ghost").num_rows == 0


def test_decay_runs_and_reports(client: TestClient, seeded: MemoryStore) -> None:
    r = client.post("/v1/agents/alice/decay", headers=ADMIN)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pass_name"] == "decay" and body["agent_id"] == "alice"
    # "dark mode in editors" folded into "... in the editor" at write time (the merge judge): 5 rows
    assert body["report"]["processed"] == seeded.engine.memories.count_rows() == 5
    assert body["report"]["skipped_concurrent_edit"] == 0


def test_decay_with_confidence(client: TestClient, seeded: MemoryStore) -> None:
    r = client.post("/v1/agents/alice/decay", json={"confidence": True}, headers=ADMIN)
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert {"importance", "confidence"} <= set(report)
    assert report["decayed_count"] == report["confidence"]["decayed_count"]
    assert report["archived_count"] == report["confidence"]["archived_count"]
    assert report["pruned_count"] == report["importance"]["pruned"]


def _a_cluster(store: MemoryStore, agent: str) -> None:
    """Two near-duplicates, so that the agent's corpus merge plan has a cluster."""
    near_duplicate(store, agent, CANONICAL, 1.0, seed=0, importance=0.9)
    near_duplicate(store, agent, "Deploy runs every night at two", 0.92, seed=1)


def test_corpus_merge_dry_run_then_apply(client: TestClient, seeded: MemoryStore) -> None:
    empty = client.post("/v1/agents/alice/corpus-merge", headers=ADMIN)  # nothing to merge: no plan is stored
    assert empty.json()["report"]["clusters"] == 0 and empty.json()["report"]["plan_id"] is None
    _a_cluster(seeded, "alice")
    before = seeded.engine.memories.count_rows()
    r = client.post("/v1/agents/alice/corpus-merge", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["report"]["dry_run"] is True and r.json()["report"]["plan_id"]
    assert seeded.engine.scan("alice", columns=["status"])["status"].to_pylist().count("superseded") == 0
    body = {"dry_run": False, "plan_id": r.json()["report"]["plan_id"]}
    r = client.post("/v1/agents/alice/corpus-merge", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["report"]["dry_run"] is False
    assert seeded.engine.memories.count_rows() == before  # merged rows are hidden, never deleted


def test_corpus_merge_applies_exactly_the_reviewed_plan_for_an_admin(
    client: TestClient, api_store: MemoryStore
) -> None:
    ids = reviewed_plan_then_late_duplicate(api_store, "alice")
    api_store.remember("bob", "Bob keeps his notes in a paper diary")  # a known agent, for the plan of another
    url = "/v1/agents/alice/corpus-merge"
    table = (api_store.engine.memories.version, api_store.engine.plans.table.count_rows())
    refused = [
        (client.post(url, json={"dry_run": False}, headers=ADMIN), 422, "plan_id of the reviewed plan"),
        (client.post(url, json={"dry_run": False, "plan_id": ids["reviewed"]}, headers=ALICE), 403, "not an admin"),
        (client.post(url, json={"dry_run": False, "plan_id": "plan-nope"}, headers=ADMIN), 404, "plan-nope"),
        (client.post(url, json={"plan_id": ids["reviewed"]}, headers=ADMIN), 422, "send dry_run: false"),
        (client.post("/v1/agents/bob/corpus-merge", json={"dry_run": False, "plan_id": ids["reviewed"]},
                     headers=ADMIN), 422, "belongs to agent 'alice'"),
    ]  # fmt: skip
    for r, status, needle in refused:
        assert r.status_code == status and needle in r.json()["detail"], r.text
    assert (api_store.engine.memories.version, api_store.engine.plans.table.count_rows()) == table  # nothing written
    r = client.post(url, json={"dry_run": False, "plan_id": ids["reviewed"]}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["report"]["merged"] == 1, r.text
    assert merged_as_reviewed(api_store, ids)  # the near-duplicate imported after the review was not merged


def test_consolidate_scope(client: TestClient, seeded: MemoryStore) -> None:
    r = client.post("/v1/agents/alice/consolidate", json={"scope": "full"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["pass_name"] == "consolidate"
    assert {"episodes_scanned", "beliefs_created", "skipped_concurrent_edit"} <= set(r.json()["report"])
    r = client.post("/v1/agents/alice/consolidate", json={"scope": "all"}, headers=ADMIN)
    assert r.status_code == 422 and "scope" in r.json()["detail"]


def test_promote(client: TestClient, seeded: MemoryStore) -> None:
    stm = seeded.list_memories("alice", tier="stm")
    assert [r["content"] for r in stm] == ["Meeting with Dana today at 3pm"]
    seeded.engine.record_access(stm, times=5)  # earned durability
    r = client.post("/v1/agents/alice/promote", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["report"]["promoted"] == 1
    assert seeded.get(stm[0]["id"], track_access=False)["tier"] == "ltm"


def test_health_tenancy(client: TestClient, seeded: MemoryStore) -> None:
    assert client.get("/v1/agents/alice/health").status_code == 401
    assert client.get("/v1/agents/alice/health", headers=BOB).status_code == 403
    r = client.get("/v1/agents/alice/health", headers=ALICE)
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert r.json()["agent_id"] == "alice" and report["total"] == 5 and 0.0 <= report["score"] <= 1.0
    # an agent with no memories is unknown, not healthy
    unknown = client.get("/v1/agents/bob/health", headers=BOB)
    assert unknown.status_code == 404 and "unknown agent 'bob'" in unknown.json()["detail"]


def test_passes_write_as_their_own_actor(client: TestClient, seeded: MemoryStore) -> None:
    _a_cluster(seeded, "alice")  # a dry run with nothing to merge stores no plan
    before = seeded.engine.memories.count_rows()
    plan = client.post("/v1/agents/alice/corpus-merge", headers=ADMIN).json()["report"]["plan_id"]
    body = {"dry_run": False, "plan_id": plan}
    assert client.post("/v1/agents/alice/corpus-merge", json=body, headers=ADMIN).status_code == 200
    assert seeded.engine.memories.count_rows() == before


def test_corpus_merge_apply_with_a_rejected_cluster_then_discard(client: TestClient, api_store: MemoryStore) -> None:
    from api_helpers import two_clusters

    ids = two_clusters(api_store, "alice")
    (pid,) = ids["plan"]
    url = "/v1/agents/alice/corpus-merge"
    before = api_store.engine.memories.version
    refused = [
        ({"dry_run": False, "plan_id": pid, "reject": [3]}, 422, "has 2 clusters (numbered 1 to 2)"),
        ({"dry_run": False, "plan_id": pid, "reject": [0]}, 422, "greater than or equal to 1"),
        ({"dry_run": False, "plan_id": pid, "reject": ["2"]}, 422, "integer"),
        ({"reject": [2]}, 422, "only used to apply"),
    ]
    for body, status, needle in refused:
        r = client.post(url, json=body, headers=ADMIN)
        assert r.status_code == status and needle in r.json()["detail"], r.text
    r = client.post(url, json={"dry_run": False, "plan_id": pid, "reject": [2]}, headers=ALICE)
    assert r.status_code == 403
    assert api_store.engine.memories.version == before  # nothing written

    r = client.post(url, json={"dry_run": False, "plan_id": pid, "reject": [2]}, headers=ADMIN)
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert (report["rejected"], report["merged"]) == ([2], 1)
    assert [c["outcome"] for c in report["per_cluster"]] == ["canonical", "rejected"]
    rows = {m["id"]: m for m in api_store.list_memories("alice")}
    assert all(rows[i]["status"] == "active" for i in ids["2"]) and rows[ids["1"][1]]["superseded_by"] == ids["1"][0]
    events = api_store.engine.audit_for_agent("alice", actions=["reject_merge"]).to_pylist()
    assert {e["actor"] for e in events} == {"api:ops"} and sorted(e["memory_id"] for e in events) == sorted(ids["2"])
    assert client.post(url, headers=ADMIN).json()["report"]["clusters"] == 0  # not proposed again

    other = api_store.engine.save_plan("alice", api_store.engine.get_plan(pid)["body"])  # type: ignore[index]
    discard = f"{url}/plans/{other}/discard"
    assert client.post(discard, headers=ALICE).status_code == 403
    assert client.post(f"/v1/agents/bob/corpus-merge/plans/{other}/discard", headers=ADMIN).status_code == 422
    assert client.post(f"{url}/plans/plan-nope/discard", headers=ADMIN).status_code == 404
    r = client.post(discard, headers=ADMIN)
    assert r.status_code == 200 and r.json()["report"] == {
        "plan_id": other, "agent_id": "alice", "status": "discarded", "clusters": 2, "discarded": True
    }  # fmt: skip
    r = client.post(url, json={"dry_run": False, "plan_id": other}, headers=ADMIN)
    assert r.status_code == 409 and f"plan {other} was discarded by api:ops" in r.json()["detail"]
    r = client.post(f"{url}/plans/{pid}/discard", headers=ADMIN)
    assert r.status_code == 422 and "was applied already" in r.json()["detail"]
