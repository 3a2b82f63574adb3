"""The five consolidation stages over many agents at once are ``consolidate`` agent by agent, done together: on a
multi-agent corpus (episodes that form beliefs, procedures from success and failure outcomes, confident facts
that make schemas, faded rows to archive) they leave the same rows, links and audit events and give every agent
the same report, over two rounds (the second reinforces, updates and lowers); they commit per stage, not per
agent; an idle run commits nothing; the watermark lives where both paths find it, so switching loses nothing;
and a sweep killed in any commit window resumes to the same end state."""

from __future__ import annotations

import json
import re
import shutil
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_pipeline.lifecycle._derived import visible_rows, write_derived
from engram_pipeline.lifecycle.beliefs import plan_beliefs
from engram_pipeline.lifecycle.consolidation import consolidate, consolidation_sweep
from engram_pipeline.lifecycle.episodes import episode_clusters, last_watermark
from engram_pipeline.lifecycle.extractors import default_extractor
from engram_pipeline.lifecycle.sweep import sweep
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.migrate import migrate
from engram_pipeline.store.sharding import by_shard
from tests.constants import SEED_POLICY
from tests.lib.lifecycle.test_sweep import commits, counts
from tests.lib.store_procs import fork_worker

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
LATER = NOW + timedelta(days=1)
AGENTS = [f"agent-{i}" for i in range(5)]
CITIES = ("Berlin", "Paris", "Rome", "Lima", "Oslo")
CASES = {"seed": SEED_POLICY, "signal": {}, "3-shards": {**SEED_POLICY, "ENGRAM_SHARDS": "3"}}
# What differs between two runs of the same work: times of writing, run ids, and ids of rows a run creates
# (rows, links and events are matched by their agent and content hash instead).
VOLATILE = ("id", "updated_at", "write_token", "created_at", "last_accessed_at", "decayed_at", "expires_at")


def open_store(uri: str, env: dict[str, str]) -> MemoryStore:
    return MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **env}))


def rows_of(store: MemoryStore, agent: str, i: int, specs: list[tuple[str, dict[str, Any]]], at: datetime) -> list:
    rows = []
    for n, (text, fields) in enumerate(specs):
        row = store.engine.new_row(agent, text, memory_id=f"{agent}-{at:%d%H}-{n}", created_at=at, **fields)
        row["vector"] = store.engine.embed([text])[0].tolist()
        rows.append(row)
    return rows


def first_round(store: MemoryStore) -> None:
    """Per agent (agents of different sizes): three episodes of where the user lives (some of low confidence,
    so that archival lets them go once a belief holds them), two of a preference, trigger-action episodes
    with success and failure outcomes, confident facts enough for a schema, and faded facts."""
    rows = []
    for i, agent in enumerate(AGENTS):
        city = CITIES[i]
        ep = {"kind": "episodic"}
        specs = [
            (f"User lives in {city}", {**ep, "confidence": 0.3}),
            (f"The user lives in {city}.", ep),
            (f"User lives in {city} now", {**ep, "confidence": 0.3}),
            ("User prefers green tea", ep),
            ("The user prefers green tea.", ep),
            *[(f"When the build fails, clear the cache ({n})", {**ep, "outcome": "success"}) for n in range(1, 4)],
            ("When the build fails, clear the cache (4)", {**ep, "outcome": "failure"}),
            *[(f"When service {i} hangs, restart its runner ({n})", {**ep, "outcome": "success"}) for n in (1, 2)],
            ("User works at Acme", {"kind": "semantic", "confidence": 0.9}),
            ("User uses vim", {"kind": "semantic", "confidence": 0.8}),
            (f"User has {i + 1} cats", {"kind": "semantic", "confidence": 0.7}),
            *[(f"old remark {n} of {agent}", {"confidence": 0.2}) for n in range(i + 1)],
        ]
        rows += rows_of(store, agent, i, specs, NOW - timedelta(days=3))
    assert len(store.engine.insert_rows(rows)) == len(rows)


def second_round(store: MemoryStore) -> None:
    """New evidence: a repeated claim (reinforces the belief), a failure and a success of a known procedure, a
    new fact (the schema gains an attribute)."""
    rows = []
    for i, agent in enumerate(AGENTS):
        ep = {"kind": "episodic"}
        specs = [
            (f"User lives in {CITIES[i]} these days", ep),
            ("When the build fails, clear the cache (5)", {**ep, "outcome": "failure"}),
            ("When the build fails, clear the cache (6)", {**ep, "outcome": "success"}),
            ("User likes jazz", {"kind": "semantic", "confidence": 0.9}),
        ]
        rows += rows_of(store, agent, i, specs, NOW + timedelta(hours=2))
    assert len(store.engine.insert_rows(rows)) == len(rows)


def snapshot(store: MemoryStore) -> dict[str, Any]:
    """Every agent's rows, links and audit events, ids replaced by the row's agent and content hash."""
    table = store.engine.scan_agents(AGENTS).to_pylist()
    name = {r["id"]: f"{r['agent_id']}:{r['content_hash']}" for r in table}

    def named(value: Any) -> Any:
        if isinstance(value, str):
            return re.sub(r"[0-9a-f]{32}", lambda m: name.get(m.group(0), m.group(0)), value)
        if isinstance(value, list):
            return [named(v) for v in value]
        return value

    def plain(row: dict[str, Any]) -> dict[str, Any]:
        out = {k: named(v) for k, v in row.items() if k not in VOLATILE}
        meta = json.loads(out.pop("metadata") or "{}")
        meta.pop("run_id", None)
        meta = json.loads(named(json.dumps(meta, sort_keys=True)))
        # lists of ids are sorted by id, and a created row's id is random: sort them by what replaced it
        return {**out, "metadata": {k: sorted(v) if isinstance(v, list) else v for k, v in meta.items()}}

    rows = {name[r["id"]]: plain(r) for r in table}
    links = sorted(
        (r["agent_id"], name.get(r["src_id"], r["src_id"]), name.get(r["dst_id"], r["dst_id"]), r["rel"], r["score"])
        for r in store.engine.links_for_agent(AGENTS).to_pylist()
    )
    events = Counter(
        (e["agent_id"], e["action"], e["actor"], name.get(e["memory_id"], e["memory_id"]))
        for agent in AGENTS
        for e in store.engine.audit_for_agent(agent).to_pylist()
    )
    return {"rows": rows, "links": links, "events": events}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("consolidation-sweep") / "base")
    first_round(open_store(uri, {}))
    return uri


def twins(base: str, tmp_path: Path, env: dict[str, str]) -> tuple[MemoryStore, MemoryStore]:
    uris = [str(tmp_path / "swept"), str(tmp_path / "looped")]
    for uri in uris:
        shutil.copytree(base, uri)
        if "ENGRAM_SHARDS" in env:  # the same corpus, re-sharded
            migrate(uri, shards=int(env["ENGRAM_SHARDS"]), settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    swept, looped = (open_store(uri, env) for uri in uris)
    return swept, looped


@pytest.mark.parametrize("case", list(CASES))
def test_the_sweep_equals_consolidate_agent_by_agent(tmp_path: Path, corpus: str, case: str) -> None:
    swept, looped = twins(corpus, tmp_path, CASES[case])
    shards = swept.settings.shards
    did: Counter[str] = Counter()
    for n, (now, more) in enumerate(((NOW, None), (LATER, second_round))):
        if more is not None:
            more(swept)
            more(looped)
        got: dict[str, Any] = {}
        want: dict[str, Any] = {}
        swept_commits = commits(
            swept, partial(lambda now, out: out.update(sweep(swept, "consolidation", AGENTS, now=now).agents), now, got)
        )
        looped_commits = commits(
            looped,
            partial(lambda now, out: out.update({a: consolidate(looped, a, now=now) for a in AGENTS}), now, want),
        )
        assert snapshot(swept) == snapshot(looped), n
        assert {a: counts(r) for a, r in got.items()} == {a: counts(r) for a, r in want.items()}, n
        did.update(k for r in want.values() for k, v in counts(r).items() if v)
        # Commits per stage and shard, whatever the number of agents: an insert, a compare-and-set and a link
        # commit for each of three stages, the archival's audit and compare-and-set; the loop pays them per agent.
        assert swept_commits["memories"] <= 8 * shards, swept_commits
        assert swept_commits["links"] <= 3 * shards, swept_commits
        assert swept_commits["cursors"] <= 16 * shards, swept_commits  # leases, begin, stages, watermarks, finish
        assert looped_commits["cursors"] >= 5 * len(AGENTS), looped_commits
        assert sum(swept_commits.values()) * 2 <= sum(looped_commits.values()), (swept_commits, looped_commits)
        # One cursor row per shard for the run; each agent's watermark in its own row, where consolidate reads it.
        assert {last_watermark(swept, a) for a in AGENTS} == {now.isoformat()}
        assert {last_watermark(looped, a) for a in AGENTS} == {now.isoformat()}
        # Nothing new: a second run, of either path at either time, commits nothing.
        for store in (swept, looped):
            assert commits(store, partial(sweep, store, "consolidation", AGENTS, now=now + timedelta(1))) == {}
            assert commits(store, partial(consolidation_sweep, store, AGENTS[:1], now=now)) == {}
            assert commits(store, partial(consolidate, store, AGENTS[-1], now=now)) == {}
    for field in ("beliefs_created", "beliefs_reinforced", "procedures_created", "procedures_reinforced",
                  "schemas_created", "schemas_updated", "archived"):  # fmt: skip
        assert did[field] == len(AGENTS), (field, did)
    saved = [
        r for shard in swept.engine.shards for r in shard.cursors.table.search().limit(None).to_arrow().to_pylist()
    ]
    keys = {r["agent_id"] for r in saved if r["pass_name"] == "consolidate"}
    groups = by_shard(AGENTS, shards)
    assert keys == set(AGENTS) | {f"shard/{k}-of-{shards}" for k, g in groups.items() if len(g) > 1}


def test_a_stage_writes_once_for_all_agents(tmp_path: Path, corpus: str) -> None:
    swept, looped = twins(corpus, tmp_path, SEED_POLICY)
    swept_commits = commits(swept, lambda: consolidation_sweep(swept, AGENTS, now=NOW))
    looped_commits = commits(looped, lambda: [consolidate(looped, a, now=NOW) for a in AGENTS])
    for table in ("memories", "links", "cursors", "audit"):
        assert swept_commits.get(table, 0) * len(AGENTS) <= looped_commits.get(table, 0) + 2 * len(AGENTS), table
    assert swept_commits["links"] == 3  # one per stage that derives (beliefs, procedures, schemas)


def test_an_idle_sweep_commits_nothing(store_uri: str) -> None:
    store = open_store(store_uri, {})
    for agent in AGENTS:
        store.remember(agent, f"{agent} lives in Berlin")
    for agents in (AGENTS, ["nobody", "nobody-else"], AGENTS[:1]):
        assert commits(store, lambda agents=agents: consolidation_sweep(store, agents, now=NOW)) == {}
    assert consolidation_sweep(store, [], now=NOW) == {}
    with pytest.raises(ValueError, match="scope"):
        consolidation_sweep(store, AGENTS, scope="everything", now=NOW)


def test_switching_between_the_sweep_and_consolidate_loses_nothing(tmp_path: Path, corpus: str) -> None:
    swept, looped = twins(corpus, tmp_path, SEED_POLICY)
    consolidation_sweep(swept, AGENTS, now=NOW)  # then agent by agent
    for a in AGENTS:
        consolidate(looped, a, now=NOW)  # then a sweep
    second_round(swept)
    second_round(looped)
    got = {a: consolidate(swept, a, now=LATER) for a in AGENTS}
    want = consolidation_sweep(looped, AGENTS, now=LATER)
    assert snapshot(swept) == snapshot(looped)
    assert {a: counts(r) for a, r in got.items()} == {a: counts(r) for a, r in want.items()}
    assert {r.episodes_scanned for r in got.values()} == {3}  # only the new episodes: the watermark held


def test_a_row_edited_between_the_decision_and_the_write_is_decided_again(store_uri: str) -> None:
    """The stages' one write for many agents keeps the compare-and-set: a reinforcement whose row moved is decided
    again from the fresh row and written at its new version; one whose row is gone counts as skipped."""
    store = open_store(store_uri, {})
    agents = AGENTS[:3]
    rows = []
    for i, agent in enumerate(agents):
        fact = [("User lives in Berlin", {"kind": "semantic", "confidence": 0.5})]
        episodes = [(t, {"kind": "episodic"}) for t in ("User lives in Berlin now", "The user lives in Berlin.")]
        rows += rows_of(store, agent, i, fact + episodes, NOW - timedelta(days=1))
    store.engine.insert_rows(rows)
    seen = visible_rows(store, agents)
    clusters = episode_clusters(store, agents, scope="full", now=NOW)
    extractor = default_extractor()
    plans = [
        plan_beliefs(store.settings, a, seen[a], clusters[a], now=NOW, run_id="r", extractor=extractor)[0]
        for a in agents
    ]
    facts = [p.changes[0]["id"] for p in plans]
    assert [len(p.changes) for p in plans] == [1, 1, 1]  # each agent's fact is reinforced, none duplicated
    store.update(facts[0], expected_version=1, tags=["edited"])
    store.delete(facts[1], expected_version=1)
    wrote = write_derived(store, plans, actor="consolidation", action="reinforce", run_id="r")
    assert [(w.applied, w.skipped) for w in wrote.values()] == [((facts[0],), ()), ((), (facts[1],)), ((facts[2],), ())]
    edited = store.get(facts[0], track_access=False)
    assert edited["tags"] == ["edited"] and edited["version"] == 3 and edited["reinforcement_count"] == 1


KILLS = 16  # kill points, spread over all the sweep's commit boundaries


def run_in_child(uri: str, kill_at: int, out: Path) -> tuple[int | None, dict[str, Any] | None]:
    env = {"ENGRAM_TEST_KILL_AT": str(kill_at), "ENGRAM_TEST_OUT": str(out)}
    proc = fork_worker("consolidation", uri, NOW.isoformat(), *AGENTS, env=env)
    proc.join(120)
    return proc.exitcode, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.integration
@pytest.mark.slow
def test_a_killed_sweep_resumes_to_the_same_end_state(tmp_path: Path, corpus: str) -> None:
    twin_uri = str(tmp_path / "twin")
    shutil.copytree(corpus, twin_uri)
    code, twin = run_in_child(twin_uri, -1, tmp_path / "twin.json")
    assert code == 0 and twin is not None
    expected = snapshot(open_store(twin_uri, SEED_POLICY))
    ticks = int(twin["ticks"])
    points = sorted({round(x) for x in np.linspace(1, ticks, min(KILLS, ticks))})
    for n, kill_at in enumerate(points):
        uri = str(tmp_path / f"k{n}")
        shutil.copytree(corpus, uri)
        code, _ = run_in_child(uri, kill_at, tmp_path / f"k{n}.json")
        assert code == -signal.SIGKILL, (kill_at, code)
        store = open_store(uri, SEED_POLICY)
        consolidation_sweep(store, AGENTS, now=NOW)
        assert snapshot(store) == expected, kill_at
        assert commits(store, lambda store=store: consolidation_sweep(store, AGENTS, now=NOW)) == {}, kill_at
        shutil.rmtree(uri)
