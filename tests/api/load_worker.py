"""Worker processes of the load test (run as scripts): an HTTP client and a lifecycle runner.

    python load_worker.py client BASE_URL TOKEN SPEC.json OUT.json SEED
    python load_worker.py lifecycle DB_URI SPEC.json OUT.json

Work is bounded by counts, not by time: a client loops until the server accepted ``updates_per_client`` of
its updates *and* the lifecycle runner has finished its ``merge_rounds`` (so the load overlaps every merge);
the lifecycle runner does ``merge_rounds`` rounds per agent while the clients run (and more, until some member
was merged: every planned member may have been edited during a review window), then leaves a marker file.
The deadline in SPEC is only a generous cap for a machine that is far too slow (the test then says so).

A client does versioned updates (GET, think, PATCH metadata.counter + 1 with the
version read), recalls and remembers on the seeded agents, plus an admin decay through the API now and then.
It records every accepted update per id, every 409 with the version it sent and the one the server reported,
and every status code. The lifecycle runner plans and applies the corpus merge and runs importance decay
through the library, recording each report and, right after each pass, what the rows show of it.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx


def scored_at(row: dict[str, Any]) -> str | None:
    """When importance decay last scored the row (its ``importance_factors``)."""
    return json.loads(row["importance_factors"]).get("scored_at") if row["importance_factors"] else None


def client(base: str, token: str, spec_path: str, out_path: str, seed: int) -> None:
    spec = json.loads(Path(spec_path).read_text())
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}"}
    admin = {"Authorization": f"Bearer {spec['admin_token']}"}
    accepted: Counter[str] = Counter()
    conflicts: list[dict[str, int]] = []
    statuses: Counter[str] = Counter()
    errors: list[str] = []
    n = 0
    with httpx.Client(base_url=base, timeout=60) as http:
        while time.time() < spec["deadline"]:
            if sum(accepted.values()) >= spec["updates_per_client"] and Path(spec["lifecycle_done"]).exists():
                break
            n += 1
            op = rng.random()
            agent = rng.choice(spec["agents"])
            try:
                if op < 0.55:
                    mid = rng.choice(spec["hot_ids"][agent])
                    got = http.get(f"/v1/memories/{mid}", headers=headers)
                    statuses[f"GET {got.status_code}"] += 1
                    if got.status_code != 200:
                        continue
                    row = got.json()
                    time.sleep(rng.uniform(0, 0.03))  # think time: lets other writers in
                    meta = {**row["metadata"], "counter": int(row["metadata"].get("counter", 0)) + 1}
                    r = http.patch(
                        f"/v1/memories/{mid}",
                        json={"expected_version": row["version"], "metadata": meta},
                        headers=headers,
                    )
                    statuses[f"PATCH {r.status_code}"] += 1
                    if r.status_code == 200:
                        accepted[mid] += 1
                    elif r.status_code == 409:
                        conflicts.append({"sent": row["version"], "current": r.json()["current_version"]})
                elif op < 0.8:
                    body = {"agent_id": agent, "query": rng.choice(spec["queries"]), "k": 5}
                    r = http.post("/v1/memories/recall", json=body, headers=headers)
                    statuses[f"RECALL {r.status_code}"] += 1
                elif op < 0.97:
                    target = agent if rng.random() < 0.7 else spec["side_agent"]
                    body = {"agent_id": target, "content": f"client {seed} observation {n} {rng.random():.6f}"}
                    r = http.post("/v1/memories", json=body, headers=headers)
                    statuses[f"REMEMBER {r.status_code}"] += 1
                else:  # an admin decay through the API, on an agent the lifecycle checks leave alone
                    r = http.post(f"/v1/agents/{spec['side_agent']}/decay", headers=admin)
                    statuses[f"DECAY {r.status_code}"] += 1
            except httpx.HTTPError as exc:
                errors.append(repr(exc))
    out = {
        "accepted": accepted,
        "accepted_total": sum(accepted.values()),
        "conflicts": conflicts,
        "statuses": statuses,
        "errors": errors,
        "ops": n,
    }
    Path(out_path).write_text(json.dumps(out))


def lifecycle(uri: str, spec_path: str, out_path: str) -> None:
    from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus
    from engram_pipeline.lifecycle.decay import decay_importance
    from engram_pipeline.model import utcnow
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore

    spec = json.loads(Path(spec_path).read_text())
    store = MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    merges: list[dict[str, Any]] = []
    decays: list[dict[str, Any]] = []
    step = 0
    rounds = 0
    while rounds < spec["merge_rounds"] or not any(m["merged"] for m in merges):
        if time.time() >= spec["deadline"]:
            break
        rounds += 1
        for agent in spec["agents"]:
            plan = consolidate_corpus(store, agent, dry_run=True)
            time.sleep(0.3)  # the review window: clients keep editing planned rows
            applied = apply_corpus_merge(store, agent, plan.plan_id)
            body = store.engine.get_plan(plan.plan_id)["body"] if plan.plan_id else {"clusters": []}
            members = {m["id"]: c["canonical"]["id"] for c in body["clusters"] for m in c["members"]}
            rows = {r["id"]: r for r in store.get_many(list(members))} if members else {}
            merged_now = [i for i, canon in members.items() if rows.get(i, {}).get("superseded_by") == canon]
            merges.append(
                {
                    "agent": agent,
                    "planned_members": len(members),
                    "merged": applied.merged,
                    "skipped": applied.skipped_concurrent_edit,
                    "members_superseded_by_canonical": len(merged_now),
                }
            )
            step += 1
            # A distinct `now` per run (12 h apart, so every score moves) tells this run's writes apart.
            now = utcnow() + timedelta(hours=12 * step)
            report = decay_importance(store, agent, now=now)
            seeded = store.get_many(spec["all_seeded"][agent], columns=["id", "importance_factors"])
            decays.append(
                {
                    "agent": agent,
                    "processed": report.processed,
                    "updated": report.updated,
                    "skipped": report.skipped_concurrent_edit,
                    "pruned": report.pruned,
                    "seeded_not_written": sum(1 for r in seeded if scored_at(r) != now.isoformat()),
                }
            )
    Path(out_path).write_text(json.dumps({"merges": merges, "decays": decays}))
    Path(spec["lifecycle_done"]).touch()


if __name__ == "__main__":
    if sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    else:
        lifecycle(sys.argv[2], sys.argv[3], sys.argv[4])
