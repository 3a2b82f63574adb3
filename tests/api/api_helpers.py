"""What the API tests share (importable: the test directory is on sys.path): keys and headers, seeded rows
and plans, a real server process (:class:`Server`) and a held embedder warm-up (:class:`HeldLoad`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

KEYS = "alice-key:tok-alice:alice;bob-key:tok-bob:bob,bob2;ops:tok-admin:*"
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
ADMIN = {"Authorization": "Bearer tok-admin"}


CANONICAL = "The deploy runs every night at two"


def near_duplicate(
    store, agent: str, content: str, cosine: float, *, seed: int, importance: float = 0.5, base: int = 0
) -> str:  # type: ignore[no-untyped-def]
    """Insert a row as an import does (no write-time checks) whose vector has ``cosine`` to one fixed topic
    (``CANONICAL`` at cosine 1 and importance 0.9 is the canonical of a merge; ``base`` picks another topic);
    returns its id."""
    import numpy as np

    base = np.random.default_rng(12345 + base).normal(size=store.embedder.dimension)
    base /= np.linalg.norm(base)
    w = np.random.default_rng(seed).normal(size=base.shape)
    w -= (w @ base) * base
    vec = cosine * base + np.sqrt(max(0.0, 1 - cosine**2)) * w / np.linalg.norm(w)
    row = store.engine.new_row(agent, content, importance=importance)
    row["vector"] = [float(x) for x in vec]
    assert store.engine.insert_rows([row]) == [row["id"]]
    return str(row["id"])


def reviewed_plan_then_late_duplicate(store, agent: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """A plan reviewed (canonical + one member), then a near-duplicate imported after the review.

    Returns the ids (``canonical``, ``member``, ``late``) and the plan id (``reviewed``)."""
    from engram_pipeline.lifecycle.corpus_merge import consolidate_corpus

    ids = {
        "canonical": near_duplicate(store, agent, CANONICAL, 1.0, seed=0, importance=0.9),
        "member": near_duplicate(store, agent, "Deploy runs every night at two", 0.92, seed=1),
    }
    reviewed = consolidate_corpus(store, agent)
    assert [[m["id"] for m in c["members"]] for c in reviewed.per_cluster] == [[ids["member"]]]
    ids["late"] = near_duplicate(store, agent, "Every night at two the deploy runs", 0.915, seed=2)
    return {**ids, "reviewed": str(reviewed.plan_id)}


def two_clusters(store, agent: str) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """Two clusters of near-duplicates, planned: ``{"plan": [plan_id], "1": [canonical, member], "2": [...]}``
    (keys are the clusters' numbers in the plan)."""
    from engram_pipeline.lifecycle.corpus_merge import consolidate_corpus

    near_duplicate(store, agent, CANONICAL, 1.0, seed=0, importance=0.9)
    near_duplicate(store, agent, "Deploy runs every night at two", 0.92, seed=1)
    near_duplicate(store, agent, "The cache is warmed at boot", 1.0, seed=3, importance=0.8, base=3)
    near_duplicate(store, agent, "Cache is warmed at boot", 0.92, seed=4, base=3)
    plan = consolidate_corpus(store, agent)
    assert plan.clusters == 2, plan
    out = {"plan": [str(plan.plan_id)]}
    for c in plan.per_cluster:
        out[str(c["cluster"])] = [c["canonical_id"], *(m["id"] for m in c["members"])]
    return out


def merged_as_reviewed(store, ids: dict[str, str]) -> bool:  # type: ignore[no-untyped-def]
    """Exactly the reviewed plan was applied: its member hidden behind the canonical, the late row untouched."""
    rows = {r["id"]: r for r in store.get_many([ids["canonical"], ids["member"], ids["late"]])}
    return (
        rows[ids["member"]]["superseded_by"] == ids["canonical"]
        and rows[ids["late"]]["status"] == "active"
        and rows[ids["late"]]["version"] == 1
        and store.engine.get_plan(ids["reviewed"])["status"] == "applied"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``python -m engram_pipeline.api`` on a free port over the store at ``uri``, with the bearer ``keys``
    (``ENGRAM_API_KEYS``); :meth:`start` returns once ``/healthz`` answers."""

    def __init__(self, uri: str, home: Path, keys: str = "writer:tok-w:w") -> None:
        self.uri, self.home, self.keys = uri, home, keys
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self) -> None:
        port = free_port()
        env = {
            **os.environ,
            "ENGRAM_EMBEDDER": "hashing",
            "ENGRAM_DB_URI": self.uri,
            "ENGRAM_HOME": str(self.home),
            "ENGRAM_API_KEYS": self.keys,
        }
        cmd = [sys.executable, "-m", "engram_pipeline.api", "--port", str(port)]
        self.proc = subprocess.Popen(cmd, env=env, cwd=self.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                assert self.proc.poll() is None, "the server exited while starting"
                time.sleep(0.1)
        raise AssertionError("the server did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None


class HeldLoad:
    """An embedder's ``embed`` that holds the server's warm-up: :attr:`loading` is set when it is called, the
    call waits for :attr:`loaded` (set by the test), and :attr:`returned` is set once it returned."""

    def __init__(self, embed: Callable[[Any], Any]) -> None:
        self._embed = embed
        self.loading, self.loaded, self.returned = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, texts: Any) -> Any:
        self.loading.set()
        try:
            assert self.loaded.wait(10)
            return self._embed(texts)
        finally:
            self.returned.set()
