"""The corpus merge plan and the health report as sweeps over many agents: the same plans, reports and cursors'
meaning as running them agent by agent (on a copy of the same store at the same ``now``), in a few commits per
shard instead of a few per agent, and nothing committed when a sweep finds nothing new to plan."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_pipeline.lifecycle._common import sweep_key
from engram_pipeline.lifecycle.corpus_merge import PLAN_PASS, consolidate_corpus, plan_sweep
from engram_pipeline.lifecycle.graph import agent_graph
from engram_pipeline.lifecycle.health import health, health_sweep
from engram_pipeline.lifecycle.pipeline import run_pipeline
from engram_pipeline.lifecycle.sweep import sweep
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.migrate import migrate
from engram_pipeline.store.sharding import by_shard
from tests.constants import SEED_POLICY
from tests.lib.lifecycle.test_corpus_merge import at_cosine, topic
from tests.lib.lifecycle.test_sweep import commits, cursor_keys, strip
from tests.lib.store_procs import fork_worker

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
AGENTS = [f"agent-{i}" for i in range(7)]
THRESHOLDS = {
    "MEMORY_DUPLICATE_THRESHOLD": "0.97",
    "MEMORY_CONSOLIDATION_MERGE_THRESHOLD": "0.85",
    "MEMORY_CONTRADICTION_THRESHOLD": "0.8",
    "MEMORY_CONTRADICTION_THRESHOLD_MAX": "0.97",
}


def open_store(uri: str, shards: int = 1) -> MemoryStore:
    env = {"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(shards), **THRESHOLDS}
    return MemoryStore.open(uri, settings=Settings.from_env(env))


def put(
    store: MemoryStore, agent: str, content: str, vector: np.ndarray, *, status: str = "active", **fields: Any
) -> str:
    row = store.engine.new_row(agent, content, created_at=fields.pop("created_at", NOW - timedelta(days=3)), **fields)
    row.update(vector=[float(x) for x in vector], status=status)
    assert len(store.engine.insert_rows([row])) == 1
    return str(row["id"])


def cluster(store: MemoryStore, agent: str, seed: int, subject: str) -> list[str]:
    """A canonical and two rephrasings in the merge band, and a bystander below it."""
    base = topic(seed)
    ids = [
        put(store, agent, f"The {subject} runs every night at two", base, importance=0.8),
        put(store, agent, f"{subject} runs every night at two", at_cosine(base, 0.93, seed + 1), importance=0.5),
        put(store, agent, f"Every night at two the {subject} runs", at_cosine(base, 0.9, seed + 2), importance=0.4),
    ]
    put(store, agent, f"Lunch is at noon near the {subject}", at_cosine(base, 0.5, seed + 3))
    return ids


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Seven agents: most with one or two clusters of near-duplicates, one with nothing to merge; agents 0 to
    2 with a plan pending from an earlier run. Since that run agent 0 gained a second cluster (its new plan
    expires the old one), agent 1 is unchanged (its plan is kept, not stored again), and agent 2 pinned the
    rows of its only cluster (an empty plan replaces the pending one)."""
    uri = str(tmp_path_factory.mktemp("plan_sweep") / "base")
    store = open_store(uri)
    pinned = []
    for n, agent in enumerate(AGENTS):
        if n == 6:
            put(store, agent, "Nothing here is like anything else", topic(900))
            continue
        ids = cluster(store, agent, 100 * n, f"deploy of {agent}")
        if n == 2:
            pinned = ids
        if n in (3, 5):
            cluster(store, agent, 100 * n + 50, f"backup of {agent}")
    for agent in AGENTS[:3]:
        assert consolidate_corpus(store, agent, now=NOW - timedelta(days=1)).plan_id
    cluster(store, "agent-0", 70, "rotation of agent-0")
    for memory_id in pinned:
        row = store.get(memory_id)
        assert row is not None
        store.update(memory_id, expected_version=row["version"], pinned=True)
    return uri


def copies(base: str, tmp_path: Path, shards: int) -> tuple[MemoryStore, MemoryStore]:
    out = []
    for name in ("swept", "looped"):
        uri = str(tmp_path / name)
        shutil.copytree(base, uri)
        if shards > 1:  # the same corpus, re-sharded
            migrate(uri, shards=shards, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
        out.append(open_store(uri, shards))
    return out[0], out[1]


def cursors(store: MemoryStore) -> dict[str, Any]:
    return {key: store.engine.get_cursor(PLAN_PASS, key) for key in cursor_keys(store, PLAN_PASS)}


def new_cursors(store: MemoryStore, earlier: dict[str, Any]) -> set[str]:
    """The plan cursors written since ``earlier`` (:func:`cursors` then)."""
    return {key for key, cursor in cursors(store).items() if earlier.get(key) != cursor}


def plans(store: MemoryStore) -> dict[str, list[dict[str, Any]]]:
    """Every agent's plans, oldest first, with plan ids replaced by the agent's plan number (ids are random)."""
    by_agent = store.engine.plans_of_agents(AGENTS)
    number = {p["plan_id"]: f"{a}#{i}" for a, ps in by_agent.items() for i, p in enumerate(ps)}
    return {
        agent: [
            {
                "status": p["status"],
                "body": p["body"],
                "expired_by": number.get((p["result"] or {}).get("expired_by")),
            }
            for p in ps
        ]
        for agent, ps in by_agent.items()
    }


@pytest.mark.parametrize("shards", [1, 3])
def test_a_plan_sweep_equals_the_per_agent_plans(tmp_path: Path, corpus: str, shards: int) -> None:
    swept, looped = copies(corpus, tmp_path, shards)
    earlier = cursors(swept)  # the base corpus's runs for agents 0 to 2
    got: dict[str, Any] = {}
    swept_commits = commits(swept, lambda: got.update(sweep(swept, "corpus_merge", AGENTS, now=NOW).agents))
    want: dict[str, Any] = {}
    looped_commits = commits(looped, lambda: want.update({a: consolidate_corpus(looped, a, now=NOW) for a in AGENTS}))

    assert plans(swept) == plans(looped)
    assert {a: strip(r) for a, r in got.items()} == {a: strip(r) for a, r in want.items()}
    # The corpus does what its docstring says, so every branch of the plan ran.
    statuses = {a: [p["status"] for p in ps] for a, ps in plans(swept).items()}
    assert statuses["agent-0"] == ["expired", "pending"] and len(got["agent-0"].expired) == 1
    assert (
        statuses["agent-1"] == ["pending"] and got["agent-1"].plan_id == swept.engine.latest_plan("agent-1")["plan_id"]
    )  # type: ignore[index]
    assert statuses["agent-2"] == ["expired", "pending"] and got["agent-2"].clusters == 0
    assert "agent-6" not in statuses and got["agent-6"].plan_id is None
    assert [got[a].clusters for a in AGENTS] == [2, 1, 0, 2, 1, 2, 0]
    assert {a: r.plan_id for a, r in got.items() if r.plan_id} == {
        a: p["plan_id"] for a, p in swept.engine.latest_plans(AGENTS, status="pending").items()
    }
    # One cursor row per shard for the sweep (a shard of one agent: that agent's); the loop, one per agent that
    # stored or expired a plan. The sweep's cursor says what the loop's say, summed.
    wrote = {"agent-0", "agent-2", "agent-3", "agent-4", "agent-5"}  # agent 1's plan is kept, agent 6 has none
    groups = by_shard(AGENTS, shards)
    assert any(len(g) > 1 for g in groups.values())
    keys = {sweep_key(g, shards)[0]: g for g in groups.values() if wrote & set(g)}
    assert new_cursors(swept, earlier) == set(keys)
    assert new_cursors(looped, earlier) == wrote
    for key, group in keys.items():
        saved = swept.engine.get_cursor(PLAN_PASS, key)
        assert saved is not None and saved["done"]
        if len(group) == 1:
            assert saved["plan_id"] == got[key].plan_id and saved["clusters"] == got[key].clusters
            continue
        assert saved["clusters"] == sum(want[a].clusters for a in group)
        assert saved["plans"] == sum(want[a].plan_id is not None for a in group)
        assert saved["saved"] == len(wrote & set(group))
        assert saved["expired"] == sum(len(want[a].expired) for a in group)
    # Commits: a plan commit to store and one to expire per shard, against one or two per agent.
    assert swept_commits["plans"] <= 2 * len(keys), swept_commits
    assert looped_commits["plans"] == len(wrote) + 2, looped_commits  # five plans stored, two expired
    assert sum(swept_commits.values()) < sum(looped_commits.values())
    # A second sweep finds every plan stored already: the same plan ids, no commit.
    again: dict[str, Any] = {}
    assert commits(swept, lambda: again.update(sweep(swept, "corpus_merge", AGENTS, now=NOW).agents)) == {}
    assert {a: r.plan_id for a, r in again.items()} == {a: r.plan_id for a, r in got.items()}
    assert all(r.expired == () for r in again.values())


def test_a_plan_sweep_of_one_agent_is_the_per_agent_plan(tmp_path: Path, corpus: str) -> None:
    swept, looped = copies(corpus, tmp_path, 1)
    one = plan_sweep(swept, ["agent-0"], now=NOW)["agent-0"]
    assert strip(one) == strip(consolidate_corpus(looped, "agent-0", now=NOW))
    assert new_cursors(swept, cursors(looped)) == {"agent-0"}
    saved = swept.engine.get_cursor(PLAN_PASS, "agent-0")
    assert saved is not None and saved["plan_id"] == one.plan_id and saved["clusters"] == 2
    assert plan_sweep(swept, [], now=NOW) == {}


def test_an_idle_plan_sweep_commits_nothing(tmp_path: Path, corpus: str) -> None:
    store, _ = copies(corpus, tmp_path, 1)
    plan_sweep(store, AGENTS, now=NOW)
    for agents in (AGENTS, ["agent-6"], ["nobody", "nobody-else"]):
        assert commits(store, partial(plan_sweep, store, agents, now=NOW)) == {}, agents


@pytest.mark.parametrize("shards", [1, 3])
def test_a_health_sweep_equals_health_per_agent(tmp_path: Path, corpus: str, shards: int) -> None:
    store, _ = copies(corpus, tmp_path, shards)
    sweep(store, "corpus_merge", AGENTS[:4], now=NOW)  # plans pending for some agents, none for the others
    sweep(store, "contradictions", AGENTS, now=NOW)
    # Contradicted, superseded, archived and stale rows, reads not folded yet, a contradiction link.
    berlin = put(store, "agent-4", "Project X of agent-4 is based in Berlin", topic(4000), access_count=2)
    lima = put(store, "agent-4", "Project X of agent-4 is based in Lima", at_cosine(topic(4000), 0.9, 4001))
    sweep(store, "contradictions", ["agent-4"], now=NOW)
    put(store, "agent-5", "An old note of agent-5", topic(5000), status="archived", confidence=0.2)
    put(store, "agent-5", "A stale note of agent-5", topic(5001), created_at=NOW - timedelta(days=90))
    put(store, "agent-5", "A doubtful note of agent-5", topic(5002), confidence=0.1)
    rows = store.engine.scan_agents(AGENTS).to_pylist()
    store.engine.log_access([r for r in rows if r["agent_id"] in ("agent-1", "agent-4")][:5], times=3, at=NOW)
    assert {r["agent_id"] for r in store.engine.links_for_agent(AGENTS).to_pylist()} == {"agent-4"}
    assert {store.get(berlin)["status"], store.get(lima)["status"]} == {"contradicted"}  # type: ignore[index]

    got = {a: r.as_dict() for a, r in health_sweep(store, AGENTS + ["nobody"], now=NOW).items()}
    want = {a: health(store, a, now=NOW).as_dict() for a in AGENTS + ["nobody"]}
    assert got == want
    assert Counter(r["duplicate_source"] for r in got.values()) == {"plan": 4, "graph": 4}
    assert got["agent-4"]["active_contradictions"] == 1 and got["nobody"]["total"] == 0
    assert {a: r.as_dict() for a, r in sweep(store, "health", AGENTS, now=NOW).agents.items()} == {
        a: want[a] for a in AGENTS
    }
    # Given the graph, the sweep takes the duplicates of the agents without a pending plan from it.
    graphs = {a: agent_graph(store, a) for a in AGENTS}
    given = health_sweep(store, AGENTS, now=NOW, graph=agent_graph(store, AGENTS))
    assert {a: r.as_dict() for a, r in given.items()} == {
        a: health(store, a, now=NOW, graph=graphs[a]).as_dict() for a in AGENTS
    }
    assert health_sweep(store, [], now=NOW) == {}


def test_the_pipeline_sweep_plans_and_reports_health_as_sweeps(tmp_path: Path, corpus: str) -> None:
    swept, looped = copies(corpus, tmp_path, 1)
    earlier = cursors(swept)
    got = sweep(swept, "pipeline", AGENTS, now=NOW).agents
    want = {agent: run_pipeline(looped, agent, now=NOW) for agent in AGENTS}
    assert plans(swept) == plans(looped)
    assert {a: strip((r.merge_plan, r.health)) for a, r in got.items()} == {
        a: strip((r.merge_plan, r.health)) for a, r in want.items()
    }
    assert {r.health.duplicate_source for r in got.values()} == {"plan", "graph"}
    assert new_cursors(swept, earlier) == {"shard/0-of-1"}  # one plan cursor for the shard, none per agent


def run_child(uri: str, kill_at: int, out: Path) -> tuple[int | None, dict[str, Any] | None]:
    env = {"ENGRAM_TEST_KILL_AT": str(kill_at), "ENGRAM_TEST_OUT": str(out)}
    proc = fork_worker("plan_sweep", uri, NOW.isoformat(), *AGENTS, env=env)
    proc.join(120)
    return proc.exitcode, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.integration
@pytest.mark.slow
def test_a_killed_plan_sweep_resumes_from_its_shard_cursor(tmp_path: Path, corpus: str) -> None:
    """SIGKILLed at every commit boundary (the lease, the cursor, storing the plans, expiring the old ones), the
    sweep run again ends with the plans and the per-agent reports of an uninterrupted one."""
    twin_uri = str(tmp_path / "twin")
    shutil.copytree(corpus, twin_uri)
    code, twin = run_child(twin_uri, -1, tmp_path / "twin.json")
    assert code == 0 and twin is not None
    expected = plans(worker_store(twin_uri))
    want = {a: strip(twin[a]) for a in AGENTS}
    assert any(want[a]["expired"] for a in AGENTS)
    resumed = 0
    for kill_at in range(1, int(twin["ticks"]) + 1):
        uri = str(tmp_path / f"k{kill_at}")
        shutil.copytree(corpus, uri)
        code, _ = run_child(uri, kill_at, tmp_path / f"k{kill_at}.json")
        assert code == -signal.SIGKILL, (kill_at, code)
        store = worker_store(uri)
        saved = store.engine.get_cursor(PLAN_PASS, "shard/0-of-1") or {}
        if not saved.get("done"):
            reports = {
                a: json.loads(json.dumps(dataclasses.asdict(r))) for a, r in plan_sweep(store, AGENTS, now=NOW).items()
            }
            assert {a: strip(r) for a, r in reports.items()} == want, kill_at
            resumed += bool(saved)
        assert plans(store) == expected, kill_at
        shutil.rmtree(uri)
    assert resumed >= 2  # killed after storing the plans, and after expiring the old ones


def worker_store(uri: str) -> MemoryStore:
    """The store as the worker process opens it (``store_procs._open``)."""
    return MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **SEED_POLICY}))
