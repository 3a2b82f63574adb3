"""A sweep over many agents is the per-agent passes, done at once: on a multi-agent corpus it leaves the same
rows, links and audit events and gives every agent the same report as running the pass agent by agent (on a
copy of the same store at the same ``now``); it commits per batch, not per agent, keeps one cursor row per
shard, commits nothing when idle, and a sweep killed in any commit window resumes from its shard cursor."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import signal
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_pipeline.lifecycle._common import sweep_key
from engram_pipeline.lifecycle.archival import archive_faded
from engram_pipeline.lifecycle.confidence import decay_confidence
from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.lifecycle.pipeline import run_pipeline
from engram_pipeline.lifecycle.promotion import promote_stm
from engram_pipeline.lifecycle.sweep import COLUMNAR, sweep
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.migrate import migrate
from engram_pipeline.store.sharding import by_shard
from tests.constants import SEED_POLICY
from tests.lib.lifecycle.test_corpus_merge import at_cosine, topic
from tests.lib.store_procs import fork_worker

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
AGENTS = [f"agent-{i}" for i in range(6)]
BATCH = 16
VOLATILE = ("updated_at", "write_token")
PER_AGENT: dict[str, Callable[..., Any]] = {
    "ltm_decay": decay_importance,
    "stm_promotion": promote_stm,
    "confidence_decay": decay_confidence,
    "archival": archive_faded,
    "contradictions": detect_contradictions,
}
# (pass, settings changes): decay under both retention policies, promotion with and without an LTM quota
CASES = {
    "decay-seed": ("ltm_decay", SEED_POLICY),
    "decay-safe": ("ltm_decay", {}),
    "promotion": ("stm_promotion", SEED_POLICY),
    "promotion-quota": ("stm_promotion", {**SEED_POLICY, "ENGRAM_LTM_QUOTA": "25"}),
    "decay-3-shards": ("ltm_decay", {**SEED_POLICY, "ENGRAM_SHARDS": "3"}),
    "promotion-3-shards": ("stm_promotion", {**SEED_POLICY, "ENGRAM_SHARDS": "3"}),
    "confidence-seed": ("confidence_decay", SEED_POLICY),
    "confidence-safe": ("confidence_decay", {}),
    "archival-seed": ("archival", SEED_POLICY),
    "archival-safe": ("archival", {}),
    "contradictions-flag": ("contradictions", {}),
    "contradictions-supersede": ("contradictions", {"MEMORY_CONTRADICTION_POLICY": "supersede"}),
}


def open_store(uri: str, env: dict[str, str]) -> MemoryStore:
    return MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **env}))


def seed(store: MemoryStore) -> int:
    """Agents of different sizes (30 to 80 rows plus their LTM duplicates), each with every kind of work: STM
    rows that earned promotion, expired ones, ones LTM already holds, LTM rows long faded (some pinned, some
    superseded by a newer row), recent LTM rows in look-alike groups, some of low confidence and linked as a
    duplicate of an earlier row. Returns the number of rows."""
    rows = []
    links: list[dict[str, Any]] = []
    for a, agent in enumerate(AGENTS):
        previous: dict[str, Any] | None = None
        for i in range(30 + 10 * a):
            kind = i % 5
            recent = NOW - timedelta(minutes=5)
            if kind == 0:
                row = store.engine.new_row(
                    agent,
                    f"We decided to deploy service {i} of {agent} on Fridays",
                    tier="stm",
                    access_count=5,
                    last_accessed_at=recent,
                    created_at=NOW - timedelta(hours=2),
                )
            elif kind == 1:
                row = store.engine.new_row(
                    agent, f"scratch note {i} of {agent}", tier="stm", created_at=NOW - timedelta(hours=30)
                )
                row["expires_at"] = NOW - timedelta(hours=6)
            elif kind == 2:
                ltm = store.engine.new_row(agent, f"We decided to keep release train {i} of {agent}", tier="ltm")
                ltm["vector"] = store.engine.embed([ltm["content"]])[0].tolist()
                rows.append(ltm)
                row = store.engine.new_row(
                    agent,
                    f"We decided to keep release train {i} of {agent} again",
                    tier="stm",
                    access_count=5,
                    last_accessed_at=recent,
                    created_at=NOW - timedelta(hours=2),
                )
                row["vector"] = ltm["vector"]
            elif kind == 3:
                row = store.engine.new_row(
                    agent,
                    f"old remark {i} of {agent}",
                    tier="ltm",
                    pinned=i % 4 == 3,
                    created_at=NOW - timedelta(days=60),
                )
                row["last_accessed_at"] = NOW - timedelta(days=60)
                if previous is not None and i % 2 == 0:  # held by a newer row: prunable under the safe policy too
                    row.update(status="superseded", superseded_by=previous["id"])
            else:  # recent; some of low confidence (archival), in look-alike groups (competition)
                row = store.engine.new_row(
                    agent,
                    f"the printer {i} of {agent} is on floor two",
                    tier="ltm",
                    access_count=1,
                    created_at=NOW - timedelta(days=2 + i % 9),
                    confidence=0.3 if i % 10 == 4 else 0.5 + (i % 7) * 0.07,
                )
            if "vector" not in row or row["vector"] is None:
                row["vector"] = store.engine.embed([row["content"]])[0].tolist()
            rows.append(row)
            if kind == 4 and i % 10 == 4 and previous is not None:  # a duplicate of an earlier row: held (safe policy)
                links.append({"agent_id": agent, "src_id": row["id"], "dst_id": previous["id"], "rel": "duplicate-of",
                              "score": 0.9})  # fmt: skip
            previous = row if kind == 4 else previous
        for k, city in enumerate(("Berlin", "Paris", "Rome")):  # pairs that contradict each other, and a bystander
            base = topic(1000 * a + k)
            for n, (where, days) in enumerate(((city, 20), ("Lima", 5))):
                row = store.engine.new_row(agent, f"Project {k} of {agent} is based in {where}",
                                    created_at=NOW - timedelta(days=days))  # fmt: skip
                row["vector"] = [float(x) for x in at_cosine(base, 0.9, 1000 * a + 10 * k + n)]
                rows.append(row)
            row = store.engine.new_row(
                agent, f"Project {k} of {agent} has a weekly review", created_at=NOW - timedelta(3)
            )
            row["vector"] = [float(x) for x in at_cosine(base, 0.82, 1000 * a + 10 * k + 5)]
            rows.append(row)
    assert len(store.engine.insert_rows(rows)) == len(rows)
    store.engine.add_links(links)
    return len(rows)


def snapshot(store: MemoryStore) -> dict[str, Any]:
    """Every agent's rows, links and audit events, without what differs between two runs (times of writing,
    run ids)."""
    rows = {
        r["id"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in store.engine.scan_agents(AGENTS).to_pylist()
    }
    links = sorted(
        (r["agent_id"], r["src_id"], r["dst_id"], r["rel"], r["score"])
        for r in store.engine.links_for_agent(AGENTS).to_pylist()
    )
    events = Counter(
        (e["agent_id"], e["action"], e["actor"], e["memory_id"])
        for agent in AGENTS
        for e in store.engine.audit_for_agent(agent).to_pylist()
    )
    return {"rows": rows, "links": links, "events": events}


def counts(report: Any) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(report).items() if k != "cursor"}


def commits(store: MemoryStore, run: Callable[[], Any]) -> dict[str, int]:
    before = store.engine.table_versions()
    run()
    after = store.engine.table_versions()
    out: dict[str, int] = {}  # by table, every shard's summed (``memories_s0of3`` counts as ``memories``)
    for name in before:
        if after[name] != before[name]:
            base = re.sub(r"_s\d+of\d+$", "", name)
            out[base] = out.get(base, 0) + after[name] - before[name]
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    uri = str(tmp_path_factory.mktemp("sweep") / "base")
    return uri, seed(open_store(uri, SEED_POLICY))


@pytest.mark.parametrize("case", list(CASES))
def test_a_sweep_equals_the_per_agent_passes(tmp_path: Path, corpus: tuple[str, int], case: str) -> None:
    name, env = CASES[case]
    env = {**env, "MEMORY_DECAY_BATCH_SIZE": str(BATCH)}  # many batches, each spanning agents
    base, total = corpus
    swept_uri, looped_uri = str(tmp_path / "swept"), str(tmp_path / "looped")
    shutil.copytree(base, swept_uri)
    shutil.copytree(base, looped_uri)
    if "ENGRAM_SHARDS" in env:  # the same corpus, re-sharded
        for uri in (swept_uri, looped_uri):
            migrate(uri, shards=int(env["ENGRAM_SHARDS"]), settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    swept, looped = open_store(swept_uri, env), open_store(looped_uri, env)

    got: dict[str, Any] = {}
    swept_commits = commits(swept, lambda: got.update(sweep(swept, name, AGENTS, now=NOW).agents))
    want: dict[str, Any] = {}
    looped_commits = commits(looped, lambda: want.update({a: PER_AGENT[name](looped, a, now=NOW) for a in AGENTS}))

    assert snapshot(swept) == snapshot(looped)
    assert {a: counts(r) for a, r in got.items()} == {a: counts(r) for a, r in want.items()}
    did = Counter(k for r in want.values() for k, v in counts(r).items() if v)
    assert (did["processed"] or did["candidates"] or did["scanned"]) == len(AGENTS), did
    assert (
        did["pruned"]
        or did["promoted"]
        or did["decayed_count"]
        or did["archived"]
        or did["flagged"]
        or did["superseded"]
    ), did
    # One cursor row per shard for the sweep (a shard of one agent: that agent's), the loop one per agent.
    shards = swept.settings.shards
    groups = by_shard(AGENTS, shards)
    assert any(len(g) > 1 for g in groups.values())
    assert cursor_keys(swept, name) == {sweep_key(g, shards)[0] for g in groups.values()}
    assert cursor_keys(looped, name) == set(AGENTS)
    # Commits are per batch and shard, whatever the number of agents.
    batches = math.ceil(total / BATCH) + shards
    per_batch = 2 if name == "ltm_decay" else 3  # decay: prune, re-score; promotion: promote, collapse, expire
    assert swept_commits["memories"] <= per_batch * batches, swept_commits
    assert swept_commits["cursors"] <= batches + 5 * shards, swept_commits  # lease, begin, advances, finish
    assert looped_commits["cursors"] >= 4 * len(AGENTS)
    # A second sweep at the same ``now`` has nothing to do and commits nothing.
    assert commits(swept, lambda: sweep(swept, name, AGENTS, now=NOW)) == {}


@pytest.mark.parametrize("name", list(PER_AGENT))
def test_a_sweep_commits_per_batch_not_per_agent(tmp_path: Path, corpus: tuple[str, int], name: str) -> None:
    base, _ = corpus
    swept_uri, looped_uri = str(tmp_path / "swept"), str(tmp_path / "looped")
    shutil.copytree(base, swept_uri)
    shutil.copytree(base, looped_uri)
    swept, looped = open_store(swept_uri, SEED_POLICY), open_store(looped_uri, SEED_POLICY)
    swept_commits = commits(swept, lambda: sweep(swept, name, AGENTS, now=NOW))
    looped_commits = commits(looped, lambda: [PER_AGENT[name](looped, a, now=NOW) for a in AGENTS])
    # One batch holds every agent's rows: a handful of commits in all, against that handful per agent.
    assert sum(swept_commits.values()) * 3 <= sum(looped_commits.values()), (swept_commits, looped_commits)
    # cursors: the lease row's first use, take, begin, advance, finish, give back
    assert swept_commits["memories"] <= 3 and swept_commits["cursors"] <= 6, swept_commits


def test_an_idle_sweep_commits_nothing(store_uri: str) -> None:
    store = open_store(store_uri, {})
    for agent in AGENTS:
        store.remember(agent, f"{agent} lives in Berlin")
    for name in PER_AGENT:
        sweep(store, name, AGENTS, now=NOW)
    for name in PER_AGENT:
        for agents in (AGENTS, ["nobody", "nobody-else"]):
            assert commits(store, partial(sweep, store, name, agents, now=NOW)) == {}, (name, agents)
    assert sweep(store, "ltm_decay", [], now=NOW).agents == {}


def test_a_sweep_runs_one_shard_at_a_time(store_uri: str) -> None:
    store = open_store(store_uri, {"ENGRAM_SHARDS": "4"})
    with pytest.raises(ValueError, match="one shard"):
        COLUMNAR["ltm_decay"](store, AGENTS, now=NOW)


def cursor_keys(store: MemoryStore, name: str) -> set[str]:
    cond = f"pass_name = '{name}'"
    tables = [shard.cursors.table for shard in store.engine.shards]
    return {r["agent_id"] for t in tables for r in t.search().where(cond).limit(None).to_arrow().to_pylist()}


KILLS = 24  # kill points per pass, spread over all its commit boundaries


def run_in_child(uri: str, name: str, kill_at: int, out: Path) -> tuple[int | None, dict[str, Any] | None]:
    env = {"ENGRAM_TEST_KILL_AT": str(kill_at), "ENGRAM_TEST_OUT": str(out)}
    proc = fork_worker("sweep", uri, name, NOW.isoformat(), str(BATCH), *AGENTS, env=env)
    proc.join(120)
    return proc.exitcode, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("name", list(PER_AGENT))
def test_a_killed_sweep_resumes_from_its_shard_cursor(tmp_path: Path, corpus: tuple[str, int], name: str) -> None:
    base, _ = corpus
    key = "shard/0-of-1"
    twin_uri = str(tmp_path / "twin")
    shutil.copytree(base, twin_uri)
    code, twin = run_in_child(twin_uri, name, -1, tmp_path / "twin.json")
    assert code == 0 and twin is not None
    expected = snapshot(open_store(twin_uri, SEED_POLICY))
    want = {a: {k: v for k, v in twin[a].items() if k != "cursor"} for a in AGENTS}
    ticks = int(twin["ticks"])
    points = sorted({round(x) for x in np.linspace(1, ticks, min(KILLS, ticks))})
    for n, kill_at in enumerate(points):
        uri = str(tmp_path / f"k{n}")
        shutil.copytree(base, uri)
        code, _ = run_in_child(uri, name, kill_at, tmp_path / f"k{n}.json")
        assert code == -signal.SIGKILL, (kill_at, code)
        store = open_store(uri, SEED_POLICY)
        saved = store.engine.get_cursor(name, key) or {}
        if not saved.get("done"):
            reports = COLUMNAR[name](store, AGENTS, now=NOW, batch_size=BATCH)
            assert {r.cursor["resumed"] for r in reports.values()} == {1 if saved else 0}, kill_at
            assert {a: json.loads(json.dumps(counts(r))) for a, r in reports.items()} == want, kill_at  # as JSON
        assert snapshot(store) == expected, kill_at
        shutil.rmtree(uri)


VARYING = ("cursor", "run_id", "plan_id")  # what differs between two runs of the same work


def strip(value: Any) -> Any:
    """A report as plain data without what differs between two runs (cursors, run and plan ids)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list | tuple):
        return [strip(v) for v in value]
    return value


def test_the_pipeline_sweep_equals_the_per_agent_pipelines(tmp_path: Path, corpus: tuple[str, int]) -> None:
    base, _ = corpus
    swept_uri, looped_uri = str(tmp_path / "swept"), str(tmp_path / "looped")
    shutil.copytree(base, swept_uri)
    shutil.copytree(base, looped_uri)
    swept, looped = open_store(swept_uri, SEED_POLICY), open_store(looped_uri, SEED_POLICY)
    got = sweep(swept, "pipeline", AGENTS, now=NOW).agents
    want = {agent: run_pipeline(looped, agent, now=NOW) for agent in AGENTS}
    assert snapshot(swept) == snapshot(looped)
    assert {a: strip(r) for a, r in got.items()} == {a: strip(r) for a, r in want.items()}
    assert sum(r.promotion.promoted + r.decay.pruned + r.confidence.decayed_count for r in want.values()) > 0
    # The columnar stages kept one cursor per shard.
    for name in ("stm_promotion", "ltm_decay", "confidence_decay", "contradictions"):
        assert cursor_keys(swept, name) == {"shard/0-of-1"}, name
