"""The write path through a real server process: clients racing the same facts get one row per fact, and a
SIGKILL of the server during a burst of writes loses no acknowledged write and leaves no half-written row."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from api_helpers import Server

from engram_pipeline.model import content_hash
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

pytestmark = pytest.mark.integration
CLIENTS = 8
FACTS = 10
HEADERS = {"Authorization": "Bearer tok-w"}


@pytest.fixture
def server(store_uri: str, settings: Settings, tmp_path: Path) -> Iterator[Server]:
    MemoryStore.open(store_uri, settings=settings).remember("w", "an earlier memory so the table exists")
    srv = Server(store_uri, tmp_path)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def variants(f: int) -> list[tuple[str, list[float]]]:
    """Ways of writing fact ``f``: the text, the text in other case and spacing (an exact duplicate), and a
    rewording whose vector is at cosine 0.99 to the text's (a near duplicate the judge merges)."""
    base = unit(np.random.default_rng(f).normal(size=384))
    w = np.random.default_rng(1000 + f).normal(size=384)
    w = unit(w - (w @ base) * base)
    near = unit(0.99 * base + np.sqrt(1 - 0.99**2) * w)
    text = f"The build cache of project {f} lives on volume {f}"
    return [
        (text, base.tolist()),
        (text.upper().replace(" ", "  "), base.tolist()),
        (f"The build cache for project {f} lives on volume {f}", near.tolist()),
    ]


def test_clients_racing_the_same_facts_get_one_row_per_fact(server: Server, store_uri: str, settings: Settings) -> None:
    go = threading.Barrier(CLIENTS)
    told: list[tuple[int, str, int]] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as http:
            go.wait()
            for f in range(FACTS):
                content, vector = variants(f)[(k + f) % 3]
                r = http.post("/v1/memories", json={"agent_id": "w", "content": content, "vector": vector})
                with lock:
                    told.append((f, r.json()["memory"]["id"], r.status_code))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(told) == CLIENTS * FACTS and {code for _, _, code in told} <= {200, 201}
    rows = MemoryStore.open(store_uri, settings=settings).engine.scan("w", columns=["id", "content"]).to_pylist()
    assert len(rows) == FACTS + 1, sorted(r["content"] for r in rows)  # one row per fact, and the earlier one
    ids: dict[int, set[str]] = {}
    for f, memory_id, _ in told:
        ids.setdefault(f, set()).add(memory_id)
    assert all(len(v) == 1 for v in ids.values()), ids  # every client was told the row that stayed
    assert {i for v in ids.values() for i in v} <= {r["id"] for r in rows}
    assert Counter(code for _, _, code in told)[201] == FACTS  # one write per fact created it


def test_a_server_killed_during_a_burst_keeps_every_acknowledged_write(
    server: Server, store_uri: str, settings: Settings
) -> None:
    acked: list[tuple[str, str, str]] = []  # (id, content, outcome) of every acknowledged write
    lock = threading.Lock()
    go = threading.Barrier(CLIENTS)
    words = [
        "amber",
        "basil",
        "cedar",
        "delta",
        "ember",
        "fjord",
        "garnet",
        "harbor",
        "indigo",
        "juniper",
        "kestrel",
        "lagoon",
    ]

    def client(k: int) -> None:
        with httpx.Client(base_url=server.base, headers=HEADERS, timeout=60) as http:
            go.wait()
            for i in range(10_000):  # until the server is gone
                rng = np.random.default_rng([k, i])
                content = f"client {k} noted: " + " ".join(rng.choice(words, size=8))
                try:
                    r = http.post("/v1/memories", json={"agent_id": "w", "content": content})
                except httpx.TransportError:
                    return
                if r.status_code in (200, 201):
                    with lock:
                        acked.append((r.json()["memory"]["id"], content, r.json()["outcome"]))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    while len(acked) < 80 and all(t.is_alive() for t in threads):
        time.sleep(0.02)
    server.stop(signal.SIGKILL)  # mid-burst: every client has a request in flight
    for t in threads:
        t.join(120)
    assert len(acked) >= 80

    server.start()
    with httpx.Client(base_url=server.base, headers=HEADERS, timeout=60) as http:
        for memory_id, content, outcome in acked:
            r = http.get(f"/v1/memories/{memory_id}")
            assert r.status_code == 200, (memory_id, outcome)
            assert outcome != "created" or r.json()["content"] == content
        created = next(a for a in acked if a[2] == "created")
        again = http.post("/v1/memories", json={"agent_id": "w", "content": created[1]})
        assert again.status_code == 200 and again.json()["memory"]["id"] == created[0]
    rows = MemoryStore.open(store_uri, settings=settings).engine.scan("w").to_pylist()
    # No half-written row: every row stored whole, once per content (acknowledged or caught by the kill).
    assert all(r["content_hash"] == content_hash("w", r["content"]) and len(r["vector"]) == 384 for r in rows)
    assert max(Counter(r["content"] for r in rows).values()) == 1
    assert {a[0] for a in acked} <= {r["id"] for r in rows}


def test_two_clients_restoring_the_same_deleted_rows_restore_each_once(
    server: Server, store_uri: str, settings: Settings
) -> None:
    """Issue 35: both clients were answered 200 and 29 of 30 ids were then held by two rows."""
    store = MemoryStore.open(store_uri, settings=settings)
    ids = []
    for n in range(30):
        row = store.remember("w", f"deleted fact {n}: the nightly export lands in bucket {n}").memory
        store.delete(row["id"])
        ids.append(row["id"])
    go = threading.Barrier(2)
    codes: dict[str, list[int]] = {i: [] for i in ids}

    def client() -> None:
        with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as http:
            go.wait()
            for memory_id in ids:
                codes[memory_id].append(http.post(f"/v1/memories/{memory_id}/restore", json={}).status_code)

    threads = [threading.Thread(target=client) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert {i: sorted(c) for i, c in codes.items() if sorted(c) != [200, 409]} == {}
    per_id = Counter(store.engine.scan("w", columns=["id"])["id"].to_pylist())
    assert [i for i in ids if per_id[i] != 1] == []
