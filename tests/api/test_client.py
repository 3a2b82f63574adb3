"""``engram_pipeline.client`` against a real ``engram serve`` (uvicorn on 127.0.0.1, a store in a temporary
directory, API keys for one agent and an admin); the retry policy against a transport that fails on purpose."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import two_clusters

from engram_pipeline import client as client_module
from engram_pipeline.api.models import MemoryOut, PlanOut, ReportResponse
from engram_pipeline.client import (
    Conflict,
    EngramClient,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerError,
    Unauthorized,
    VersionConflict,
)
from engram_pipeline.reporting import SDK_HEALTH_NAMES
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

KEYS = "alice-key:tok-alice:alice;bob-key:tok-bob:bob;ops:tok-admin:*"
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's working directory; its store is ``store`` in it."""
    return tmp_path_factory.mktemp("client")


@pytest.fixture(scope="module")
def server(server_home: Path) -> Iterator[str]:
    tmp = server_home
    port = _free_port()
    script = Path(sys.executable).parent / "engram"
    command = (
        [str(script)] if script.exists() else [sys.executable, "-c", "from engram_pipeline.cli import main; main()"]
    )
    env = {
        **os.environ,
        "ENGRAM_EMBEDDER": "hashing",
        "ENGRAM_API_KEYS": KEYS,
        "PYTHONPATH": str(REPO),  # this checkout's code, whatever is installed
    }
    log = open(tmp / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*command, "--db", str(tmp / "store"), "serve", "--port", str(port)],
        env=env,
        cwd=tmp,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with EngramClient(base) as probe:
            probe.wait_ready(timeout=90)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def alice(server: str) -> Iterator[EngramClient]:
    with EngramClient(server, api_key="tok-alice", timeout=30) as c:
        yield c


@pytest.fixture
def admin(server: str) -> Iterator[EngramClient]:
    with EngramClient(server, api_key="tok-admin", timeout=60) as c:
        yield c


@pytest.mark.integration
def test_memory_calls(alice: EngramClient, server: str) -> None:
    made = alice.remember("alice", "User prefers dark mode in the editor", tags=["ui"], importance=0.6)
    assert made.outcome == "created" and made.memory.version == 1 and made.memory.tags == ["ui"]
    assert isinstance(made.memory, MemoryOut)  # the first names are aliases of client.memories
    again = alice.remember("alice", "user prefers DARK mode in the editor")
    assert again.outcome == "exact_duplicate" and again.memory.id == made.memory.id
    mid = made.memory.id

    assert alice.get(mid).content == "User prefers dark mode in the editor"
    hits = alice.recall("alice", "which editor theme?", k=3)
    assert hits and hits[0].memory.id == mid and 0 <= hits[0].similarity <= 1

    updated = alice.update(mid, expected_version=1, importance=0.9, tags=["ui", "editor"])
    assert updated.version == 2 and updated.importance == 0.9 and set(updated.tags) == {"ui", "editor"}
    with pytest.raises(VersionConflict) as stale:
        alice.update(mid, expected_version=1, pinned=True)
    assert stale.value.current_version == 2 and stale.value.status == 409

    with pytest.raises(VersionConflict) as stale_delete:
        alice.delete(mid, expected_version=1)
    assert stale_delete.value.current_version == 2
    gone = alice.delete(mid, expected_version=2)
    assert gone.id == mid and gone.version == 2
    with pytest.raises(NotFound):
        alice.get(mid)
    assert alice.recall("alice", "which editor theme?", k=3) == [] or all(
        h.memory.id != mid for h in alice.recall("alice", "editor theme")
    )
    back = alice.restore(mid)
    assert back.id == mid and back.importance == 0.9 and back.version == 3
    with pytest.raises(TypeError, match="RememberRequest has no field colour"):  # the request model's names
        alice.remember("alice", "x", colour="red")
    from engram_pipeline import client as client_module

    assert client_module.Memory is MemoryOut  # the answers' first names too


@pytest.mark.integration
def test_typed_errors(alice: EngramClient, server: str) -> None:
    with EngramClient(server, api_key="tok-bob") as bob:
        theirs = bob.remember("bob", "Bob's private note").memory.id
    with pytest.raises(NotFound):  # another agent's memory answers like an unknown one (no existence oracle)
        alice.get(theirs)
    with pytest.raises(Forbidden):
        alice.remember("bob", "not mine to write")
    with pytest.raises(NotFound):
        alice.get("no-such-memory")
    with pytest.raises(InvalidRequest, match="k"):
        alice.recall("alice", "x", k=0)
    with EngramClient(server, api_key="wrong") as stranger, pytest.raises(Unauthorized):
        stranger.get(theirs)
    with pytest.raises(Forbidden):  # lifecycle passes need an admin key
        alice.cognitive.decay(agent_id="alice")


@pytest.mark.integration
def test_recall_options(alice: EngramClient) -> None:
    kept = alice.remember("alice", "The staging database is on port 5433", confidence=0.95).memory
    faded = alice.remember("alice", "The staging database moved to port 6543", confidence=0.2).memory
    hits = alice.recall("alice", "staging database port", k=10, tiers=["hot"])
    assert [h.memory.id for h in hits] == [kept.id]
    low = alice.recall("alice", "staging database port", k=10, min_confidence=0.5)
    assert faded.id not in {h.memory.id for h in low}
    with_all = alice.recall("alice", "staging database port", k=10, include_archived=True, include_superseded=True)
    assert {kept.id, faded.id} <= {h.memory.id for h in with_all}


@pytest.mark.integration
def test_cognitive_namespace(alice: EngramClient, admin: EngramClient) -> None:
    for text in ("User lives in Berlin", "User works as a nurse", "User has a cat named Tom"):
        alice.remember("alice", text)
    decayed = admin.cognitive.decay(agent_id="alice")
    assert isinstance(decayed, ReportResponse) and (decayed.pass_name, decayed.agent_id) == ("decay", "alice")
    assert decayed.report["decayed_count"] == decayed.report["confidence"]["decayed_count"] >= 0
    assert decayed.report["archived_count"] >= 0 and decayed.report["pruned_count"] >= 0
    consolidated = admin.cognitive.consolidate(agent_id="alice", scope="full").report
    assert consolidated["episodes_scanned"] >= 0 and "beliefs_created" in consolidated
    health = alice.cognitive.health("alice")
    assert isinstance(health, ReportResponse) and health.pass_name == "health"
    # the SDK's names, each the report field SDK_HEALTH_NAMES says it repeats
    report = health.report
    assert set(SDK_HEALTH_NAMES) < set(report)
    assert all(report[sdk] == report[name] for sdk, name in SDK_HEALTH_NAMES.items())
    assert 0.0 <= report["overall_score"] <= 1.0
    assert sum(report["tier_distribution"].values()) == report["visible"]
    assert report["stale_count"] >= 0
    # no field list of the client's own: the answers are the API's model
    assert not {"Health", "TierDistribution", "DecayResult", "ConsolidateResult"} & set(dir(client_module))
    with pytest.raises(NotFound, match="unknown agent"):
        admin.cognitive.health("nobody")


@pytest.mark.integration
def test_memories_namespace(alice: EngramClient) -> None:
    """``client.memories``: every verb over HTTP, answered with the API's own models."""
    text = "User keeps a blue notebook for meeting notes"
    made = alice.memories.store("alice", text, tags=("notes",), importance=0.6)
    assert isinstance(made.memory, MemoryOut) and made.outcome == "created" and made.memory.tags == ["notes"]
    got = alice.memories.get(made.memory.id)
    assert (got.content, got.version, got.importance) == (text, made.memory.version, 0.6)
    hits = alice.memories.recall("alice", text, k=3)
    assert hits.count == len(hits.data) and hits.data[0].memory.id == made.memory.id
    updated = alice.memories.update(got.id, expected_version=got.version, importance=0.8, tags=["notes", "ui"])
    assert (updated.version, updated.importance, updated.tags) == (got.version + 1, 0.8, ["notes", "ui"])
    with pytest.raises(VersionConflict) as stale:
        alice.memories.update(got.id, expected_version=got.version, pinned=True)
    assert stale.value.current_version == updated.version
    deleted = alice.memories.delete(got.id, expected_version=updated.version)
    assert (deleted.id, deleted.version, deleted.deleted) == (got.id, updated.version, True)
    with pytest.raises(NotFound):
        alice.memories.get(got.id)
    restored = alice.memories.restore(got.id)
    assert (restored.id, restored.content, restored.status) == (got.id, text, "active")
    # a name the request model does not have is refused before anything is sent
    with pytest.raises(TypeError, match="RememberRequest has no field colour"):
        alice.memories.store("alice", "x", colour="red")
    with pytest.raises(TypeError, match="UpdateRequest has no field status"):
        alice.memories.update(got.id, expected_version=restored.version, status="archived")
    with pytest.raises(Forbidden):
        alice.memories.store("bob", "not alice's to write")


@pytest.mark.integration
def test_plans_and_promote(alice: EngramClient, admin: EngramClient, server_home: Path) -> None:
    """``client.plans``: create (dry run), list, show, apply with a veto, discard; ``cognitive.promote``."""
    store = MemoryStore.open(str(server_home / "store"), settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    ids = two_clusters(store, "alice")  # the planned clusters, inserted as an import would
    made = admin.plans.create("alice").report
    assert made["dry_run"] is True and made["clusters"] == 2
    plan_id = made["plan_id"]
    pending = alice.plans.list("alice", status="pending")
    assert [p.plan_id for p in pending.data] == [plan_id] and pending.count == 1
    shown = alice.plans.show("alice", plan_id)
    assert isinstance(shown, PlanOut) and shown.status == "pending" and shown.agent_id == "alice"
    assert set(PlanOut.model_fields) == set(store.engine.plans.table.schema.names)
    assert [c["canonical"]["id"] for c in shown.body["clusters"]] == [ids["1"][0], ids["2"][0]]
    with pytest.raises(Forbidden):
        alice.plans.apply("alice", plan_id)  # not an admin key
    with pytest.raises(NotFound):
        alice.plans.show("alice", "plan-nope")

    applied = admin.plans.apply("alice", plan_id, reject=[2]).report
    assert (applied["rejected"], applied["merged"]) == ([2], 1)
    assert alice.plans.show("alice", plan_id).status == "applied"
    assert alice.memories.get(ids["1"][1]).superseded_by == ids["1"][0]
    assert {alice.memories.get(i).status for i in ids["2"]} == {"active"}

    other = store.engine.save_plan("alice", shown.body)
    closed = admin.plans.discard("alice", other).report
    assert (closed["status"], closed["discarded"]) == ("discarded", True)
    with pytest.raises(Conflict, match="was discarded"):
        admin.plans.apply("alice", other)
    assert alice.plans.list("alice", status="pending").count == 0

    note = alice.memories.store("alice", "Standup moved to 9:30 on Mondays", tier="stm", pinned=True).memory
    store.engine.record_access([store.get(note.id, track_access=False)], times=5)  # earned durability
    promoted = admin.cognitive.promote(agent_id="alice")
    assert (promoted.pass_name, promoted.agent_id, promoted.report["promoted"]) == ("promote", "alice", 1)
    assert alice.memories.get(note.id).tier == "ltm"


def _flaky(fail: int, status: int) -> tuple[httpx.MockTransport, list[str]]:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) <= fail:
            return httpx.Response(status, json={"detail": "warming up"})
        return httpx.Response(200, json={"data": [], "count": 0})

    return httpx.MockTransport(handler), calls


def test_reads_are_retried_writes_are_not() -> None:
    transport, calls = _flaky(2, 503)
    with EngramClient("http://engram.test", transport=transport, retries=2, backoff=0) as c:
        assert c.recall("alice", "x") == []
    assert calls == ["POST", "POST", "POST"]

    transport, calls = _flaky(1, 503)
    client = EngramClient("http://engram.test", transport=transport, retries=2, backoff=0)
    with client as c, pytest.raises(ServerError) as failed:
        c.update("m1", expected_version=1, importance=0.5)
    assert failed.value.status == 503 and calls == ["PATCH"]

    transport, calls = _flaky(5, 503)
    client = EngramClient("http://engram.test", transport=transport, retries=1, backoff=0)
    with client as c, pytest.raises(ServerError):
        c.recall("alice", "x")
    assert len(calls) == 2


def test_unreachable_server_is_a_server_error() -> None:
    with EngramClient(f"http://127.0.0.1:{_free_port()}", retries=1, backoff=0, timeout=2) as c:
        assert not c.ready()
        with pytest.raises(ServerError, match="cannot reach"):
            c.get("m1")
