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

from engram_pipeline.client import (
    EngramClient,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerError,
    Unauthorized,
    VersionConflict,
)

KEYS = "alice-key:tok-alice:alice;bob-key:tok-bob:bob;ops:tok-admin:*"
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("client")
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
    assert made.outcome == "created" and made.memory.version == 1 and made.memory.tags == ("ui",)
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
    assert decayed.decayed_count >= 0 and decayed.archived_count >= 0
    assert decayed.decayed_count == decayed.report["confidence"]["decayed_count"]
    consolidated = admin.cognitive.consolidate(agent_id="alice", scope="full")
    assert consolidated.agent_id == "alice" and consolidated.episodes_scanned >= 0
    health = alice.cognitive.health("alice")
    assert 0.0 <= health.overall_score <= 1.0 and health.overall_score == health.report["score"]
    tiers = health.tier_distribution
    assert tiers.hot + tiers.warm + tiers.cold + tiers.archive == health.report["visible"]
    assert health.contradiction_count >= 0 and health.stale_count >= 0
    with pytest.raises(NotFound, match="unknown agent"):
        admin.cognitive.health("nobody")


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
