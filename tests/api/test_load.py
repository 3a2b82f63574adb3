"""Under load: a real server process, several client processes doing remember, recall and versioned updates,
and a lifecycle process running the corpus merge (plan, review window, apply) and importance decay on the
same agents at the same time.

Afterwards: no accepted update is lost (each seeded row's ``metadata.counter`` equals the number of updates the
server accepted for it), every 409 was a real conflict (the row was at a newer version than the one sent), every
row a pass meant to write but did not is counted in its ``skipped_concurrent_edit``, and no request got a 5xx.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

AGENTS = ["a1", "a2"]
SIDE = "a3"
CLIENTS = 3
# The load is bounded by counts; the time cap only stops a machine far too slow to finish them.
UPDATES_PER_CLIENT = 25
MERGE_ROUNDS = 3
CAP_SECONDS = 300
WORKER = str(Path(__file__).with_name("load_worker.py"))
NAMES = ["amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor"]


def seed(store: MemoryStore) -> dict[str, list[str]]:
    """Per agent: 8 star clusters in the merge band (a canonical and two paraphrases at cosine ~0.92 to it)
    and 6 unrelated rows; every row starts with ``metadata.counter = 0``."""
    rng = np.random.default_rng(7)
    dim = store.embedder.dimension
    ids: dict[str, list[str]] = {}
    for agent in AGENTS:
        ids[agent] = []
        for name in NAMES:
            base = rng.normal(size=dim)
            base /= np.linalg.norm(base)
            texts = [
                f"deploys of the {name} service happen on friday afternoons",
                f"deploys of the {name} service usually happen on friday afternoons",
                f"deploys of the {name} service often happen on friday afternoons",
            ]
            for j, text in enumerate(texts):
                vec = base
                if j:
                    noise = rng.normal(size=dim)
                    noise -= noise.dot(base) * base
                    vec = base + 0.42 * noise / np.linalg.norm(noise)  # cosine ~0.92 to the canonical
                # Inserted as an import would: remember folds a pair the merge judge would merge.
                row = store.engine.new_row(agent, text, importance=0.9 if j == 0 else 0.5, metadata={"counter": 0})
                row["vector"] = (vec / np.linalg.norm(vec)).tolist()
                assert store.engine.insert_rows([row]) == [row["id"]], text
                ids[agent].append(row["id"])
        for k in range(6):
            r = store.remember(agent, f"{agent} unrelated fact {NAMES[k]} number {k}", metadata={"counter": 0})
            ids[agent].append(r.memory["id"])
    return ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
@pytest.mark.slow
def test_no_lost_update_under_load(store_uri: str, settings: Settings, tmp_path: Path) -> None:
    store = MemoryStore.open(store_uri, settings=settings)
    ids = seed(store)
    port = free_port()
    env = {
        **os.environ,
        "ENGRAM_EMBEDDER": "hashing",
        "ENGRAM_DB_URI": store_uri,
        "ENGRAM_HOME": str(tmp_path / "home"),
        "ENGRAM_API_KEYS": "client:tok-c:a1,a2,a3;ops:tok-admin:*",
    }
    log = (tmp_path / "server.log").open("w")  # noqa: SIM115 (closed in the finally below)
    server = subprocess.Popen(
        [sys.executable, "-m", "engram_pipeline.api", "--port", str(port), "--log-level", "warning"],
        env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    workers = []
    try:
        for _ in range(300):
            try:
                httpx.get(f"{base}/openapi.json", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, (tmp_path / "server.log").read_text()
                time.sleep(0.1)
        spec = {
            "deadline": time.time() + CAP_SECONDS,
            "updates_per_client": UPDATES_PER_CLIENT,
            "merge_rounds": MERGE_ROUNDS,
            "lifecycle_done": str(tmp_path / "lifecycle.done"),
            "agents": AGENTS,
            "side_agent": SIDE,
            "admin_token": "tok-admin",
            # updates concentrate on the clustered rows, which the merge also writes
            "hot_ids": {a: ids[a][:24] for a in AGENTS},
            "all_seeded": ids,
            "queries": ["friday deploys", "basil service", "unrelated fact", "observation"],
        }
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        for i in range(CLIENTS):
            args = ["client", base, "tok-c", str(tmp_path / "spec.json"), str(tmp_path / f"client{i}.json"), str(i)]
            workers.append(subprocess.Popen([sys.executable, WORKER, *args], env=env, cwd=tmp_path))
        args = ["lifecycle", store_uri, str(tmp_path / "spec.json"), str(tmp_path / "lifecycle.json")]
        workers.append(subprocess.Popen([sys.executable, WORKER, *args], env=env, cwd=tmp_path))
        for w in workers:
            assert w.wait(timeout=CAP_SECONDS + 60) == 0
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        server.terminate()
        server.wait(timeout=30)
        log.close()

    clients = [json.loads((tmp_path / f"client{i}.json").read_text()) for i in range(CLIENTS)]
    passes = json.loads((tmp_path / "lifecycle.json").read_text())
    statuses: Counter[str] = sum((Counter(c["statuses"]) for c in clients), Counter())
    accepted: Counter[str] = sum((Counter(c["accepted"]) for c in clients), Counter())
    conflicts = [x for c in clients for x in c["conflicts"]]

    # no request got a 5xx, and none failed at the transport level
    assert not [s for s in statuses if s.split()[1].startswith("5")], statuses
    assert not [e for c in clients for e in c["errors"]]
    # every 409 was a real conflict: the row had moved past the version the client sent
    assert all(x["current"] > x["sent"] for x in conflicts), conflicts
    # no accepted update was lost: each row's counter counts exactly the updates the server accepted for it
    fresh = MemoryStore.open(store_uri, settings=settings)
    rows = {r["id"]: r for r in fresh.get_many([i for a in AGENTS for i in ids[a]])}
    assert len(rows) == sum(len(ids[a]) for a in AGENTS)  # nothing seeded was pruned or lost
    lost = {i: (json.loads(r["metadata"]).get("counter"), accepted[i]) for i, r in rows.items()
            if json.loads(r["metadata"]).get("counter", 0) != accepted[i]}  # fmt: skip
    assert not lost, lost
    # every lifecycle skip was counted: what a pass meant to write and did not is in skipped_concurrent_edit
    for m in passes["merges"]:
        assert m["members_superseded_by_canonical"] >= m["merged"]
        assert m["planned_members"] - m["merged"] <= m["skipped"], m
    for d in passes["decays"]:
        assert d["seeded_not_written"] <= d["skipped"], d
    merged = sum(m["merged"] for m in passes["merges"])
    summary = {
        "requests": dict(sorted(statuses.items())),
        "accepted_updates": sum(accepted.values()),
        "conflicts_409": len(conflicts),
        "merge_runs": len(passes["merges"]),
        "members_merged": merged,
        "merge_skipped_concurrent_edit": sum(m["skipped"] for m in passes["merges"]),
        "decay_runs": len(passes["decays"]),
        "decay_rows_updated": sum(d["updated"] for d in passes["decays"]),
        "decay_skipped_concurrent_edit": sum(d["skipped"] for d in passes["decays"]),
    }
    print("load summary:", json.dumps(summary))
    # the load was what the test claims: every client got its updates accepted, every merge round ran
    short = [c["accepted_total"] for c in clients if c["accepted_total"] < UPDATES_PER_CLIENT]
    assert not short, f"time cap of {CAP_SECONDS}s hit before the clients' updates were accepted: {summary}"
    assert len(passes["merges"]) >= MERGE_ROUNDS * len(AGENTS), f"time cap hit during the merge rounds: {summary}"
    assert merged > 0 and passes["decays"], summary
