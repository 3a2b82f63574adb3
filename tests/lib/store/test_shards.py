"""A store sharded by agent (``ENGRAM_SHARDS``): each agent's rows live in its shard's tables only, every verb
finds them there, writers of different shards commit to different tables, and a store refuses another count."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engram_pipeline.lifecycle.pipeline import run_pipeline
from engram_pipeline.model import content_hash
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore, ShardCountMismatch
from engram_pipeline.store.meta import SHARDS, read_meta
from engram_pipeline.store.sharding import by_shard
from engram_pipeline.store.shards import table_name

ROOT = Path(__file__).resolve().parents[3]
AGENTS = [f"agent-{i}" for i in range(12)]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def sharded(uri: str, shards: int = 4, **env: str) -> MemoryStore:
    return MemoryStore.open(
        uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(shards), **env})
    )


def corpus(store: MemoryStore) -> dict[str, list[str]]:
    """Three memories per agent, with fixed ids and times (so two stores can be compared row for row)."""
    out: dict[str, list[str]] = {}
    for agent in AGENTS:
        facts = [f"{agent} works on project {agent[-1]}", f"{agent} prefers tea", f"{agent} met Ada on Monday"]
        ids = []
        for n, text in enumerate(facts):
            mid = f"{agent}-m{n}"
            r = store.remember(agent, text, memory_id=mid, created_at=T0 + timedelta(hours=n), tier="ltm")
            ids.append(r.memory["id"])
        out[agent] = ids
    return out


def test_each_agents_rows_live_only_in_its_shard(store_uri: str) -> None:
    store = sharded(store_uri)
    corpus(store)
    assert store.shard_count == 4 and sorted(store.agents()) == sorted(AGENTS)
    groups = by_shard(AGENTS, 4)
    assert len(groups) > 1, "the corpus spans shards"
    for k in range(4):
        table = store.engine.shards[k].memories
        assert table.name == table_name("memories", k, 4) == f"memories_s{k}of4"
        held = sorted(set(table.to_arrow()["agent_id"].to_pylist()))
        assert held == groups.get(k, []) == store.engine.agents_in_shard(k)
        assert all(store.engine.shard_of(a) == k for a in held)
    assert set(store.engine.tables()) == {
        table_name(b, k, 4) for b in store.engine.shards[0].tables() for k in range(4)
    }
    assert sum(store.count(a) for a in AGENTS) == store.count() == 3 * len(AGENTS)
    assert {a: c["active"] for a, c in store.engine.counts_by_status().items()} == dict.fromkeys(AGENTS, 3)


def test_verbs_route_to_the_agents_shard(store_uri: str) -> None:
    store = sharded(store_uri)
    ids = corpus(store)
    agent = AGENTS[5]
    mid = ids[agent][1]
    row = store.get(mid)  # by id alone: found in whichever shard holds it
    assert row["agent_id"] == agent and store.get(mid, agent_id=agent)["id"] == mid
    assert {r["id"] for r in store.get_many([i for a in AGENTS for i in ids[a]], columns=["id"])} == {
        i for a in AGENTS for i in ids[a]
    }
    assert store.recall(agent, "prefers tea", k=1)[0].memory["id"] == mid
    updated = store.update(mid, expected_version=row["version"], content=f"{agent} prefers coffee")
    assert updated["version"] == row["version"] + 1
    with pytest.raises(Exception, match="expected version"):
        store.update(mid, expected_version=row["version"], tags=["stale"])  # the compare-and-set holds
    store.delete(mid)
    assert mid not in {r["id"] for r in store.list_memories(agent)}
    restored = store.restore(mid)
    assert restored["content"] == f"{agent} prefers coffee" and restored["agent_id"] == agent
    assert [e["action"] for e in store.audit_events(mid)] == ["update", "delete", "restore"]
    k = store.engine.shard_of(agent)
    assert store.engine.shards[k].audit.table.count_rows() == 3
    assert sum(s.audit.table.count_rows() for s in store.engine.shards) == 3  # no other shard got an event
    store.engine.log_access([store.get(i, track_access=False) for a in AGENTS[:4] for i in ids[a]])
    assert store.engine.fold_access().applied == 12
    assert store.get(ids[AGENTS[0]][0], track_access=False)["access_count"] == 1
    plan = store.engine.save_plan(agent, {"clusters": []})
    assert store.engine.get_plan(plan)["agent_id"] == agent and store.engine.close_plan(plan, "discarded", {})
    store.engine.set_cursor("p", agent, {"after": "x"})
    assert store.engine.get_cursor("p", agent) == {"after": "x"}
    assert store.engine.shards[k].cursors.table.count_rows() == 1
    report = store.maintain()
    assert len(report.tables) == 24 and not report.skipped


def test_a_pass_gives_the_same_rows_sharded_or_not(tmp_path: Path) -> None:
    one, four = sharded(str(tmp_path / "one"), 1), sharded(str(tmp_path / "four"), 4)
    corpus(one), corpus(four)
    now = T0 + timedelta(days=40)
    for agent in AGENTS[:4]:
        reports = [dataclasses.replace(run_pipeline(s, agent, now=now).decay, cursor={}) for s in (one, four)]
        assert reports[0] == reports[1]
    columns = ["id", "agent_id", "status", "tier", "version", "importance", "confidence", "superseded_by"]
    rows = [
        sorted(s.get_many([f"{a}-m{n}" for a in AGENTS for n in range(3)], columns=columns), key=str)
        for s in (one, four)
    ]
    assert rows[0] == rows[1]


WRITER = """
import json, sys
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
uri, agent, start, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": "4"}))
for i in range(start, start + n):
    store.remember(agent, f"{agent} note {i} about topic {i * 7919 % 1000}")
print(json.dumps(store.count(agent)))
"""


def _writers(uri: str, agents: list[str], n: int, *, start: int = 0) -> list[int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, uri, a, str(start), str(n)], env=env, stdout=subprocess.PIPE, text=True
        )
        for a in agents
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return [json.loads(o) for o in outs]


def test_writers_of_different_shards_commit_to_different_tables(store_uri: str) -> None:
    store = sharded(store_uri)
    a, b = "agent-0", next(x for x in AGENTS if store.engine.shard_of(x) != store.engine.shard_of("agent-0"))
    ka, kb = store.engine.shard_of(a), store.engine.shard_of(b)
    for agent, k in ((a, ka), (b, kb)):  # one writer alone: only its shard's tables move
        before = store.engine.table_versions()
        assert _writers(store_uri, [agent], 3) == [3]
        moved = {name for name, v in store.engine.table_versions().items() if v != before[name]}
        assert moved and moved <= {table_name(base, k, 4) for base in store.engine.shards[k].tables()}
    assert _writers(store_uri, [a, b], 10, start=3) == [13, 13]  # racing, in two processes: nothing lost
    assert store.engine.agents_in_shard(ka).count(a) == 1 and a not in store.engine.agents_in_shard(kb)


def test_another_shard_count_is_refused_and_changes_nothing(store_uri: str) -> None:
    store = sharded(store_uri)
    corpus(store)
    before = (store.engine.table_versions(), sorted(p.name for p in Path(store_uri).iterdir()))
    for other in (1, 2, 8):
        with pytest.raises(ShardCountMismatch, match="has 4 shard") as err:
            sharded(store_uri, other)
        assert "ENGRAM_SHARDS=4" in str(err.value) and f"engram migrate --shards {other}" in str(err.value)
    assert (store.engine.table_versions(), sorted(p.name for p in Path(store_uri).iterdir())) == before
    assert sharded(store_uri, 4).count() == 3 * len(AGENTS)


def test_a_store_without_a_recorded_count_has_one_shard(store_uri: str) -> None:
    store = sharded(store_uri, 1)
    store.remember("a", "User lives in Berlin")
    assert read_meta(store.engine.meta)[SHARDS] == "1"
    store.engine.meta.delete(f"key = '{SHARDS}'")  # as a store made before shards were recorded
    again = sharded(store_uri, 1)
    assert again.shard_count == 1 and again.engine.memories.name == "memories" and again.count("a") == 1
    with pytest.raises(ShardCountMismatch):
        sharded(store_uri, 4)


def test_one_shard_keeps_todays_table_names(store_uri: str) -> None:
    store = sharded(store_uri, 1)
    assert set(store.engine.tables()) == {"memories", "links", "audit", "plans", "cursors", "access_log"}
    assert content_hash("a", "x")  # the hash is the agent's: rows of one content hash share a shard


def test_the_sharded_tables_are_not_reachable_as_one(store_uri: str) -> None:
    store = sharded(store_uri)
    with pytest.raises(Exception, match="4 shards"):
        _ = store.engine.memories
    assert store.engine.shard_for("agent-1") is store.engine.shards[store.engine.shard_of("agent-1")]
    lease: Any = store.engine.lease_holder("ltm_decay/agent-1")
    assert lease is None and store.engine.shards[store.engine.shard_of("agent-1")].cursors.table.count_rows() == 1


def test_many_agent_verbs_span_shards(store_uri: str) -> None:
    from engram_pipeline.lifecycle.sweep import sweep

    store = sharded(store_uri)
    corpus(store)
    rows = store.engine.scan_agents(AGENTS[:7], columns=["id", "agent_id"])
    assert len(by_shard(AGENTS[:7], 4)) > 1 and rows.num_rows == 21
    assert set(rows["agent_id"].to_pylist()) == set(AGENTS[:7])
    assert store.engine.scan_agents([], columns=["id"]).num_rows == 0
    report = sweep(store, "ltm_decay", AGENTS, now=T0 + timedelta(days=3))
    assert sorted(report.agents) == sorted(AGENTS) and report.totals()["processed"] == 3 * len(AGENTS)
