"""Pass commands on the sample corpus: each prints a table, or parseable JSON with ``--json``."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_pipeline.importer import import_jsonl
from engram_pipeline.sample import load_sample_corpus
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.cli.conftest import parse

PASSES = [("decay",), ("decay-confidence",), ("promote",), ("consolidate-corpus",), ("consolidate", "--scope", "full"),
          ("health",)]  # fmt: skip


@pytest.fixture
def seeded(db: str) -> str:
    store = MemoryStore.open(db, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    assert import_jsonl(store, load_sample_corpus(), checks="exact").errors == ()  # duplicates left for the passes
    return db


@pytest.mark.slow
@pytest.mark.parametrize("args", PASSES, ids=[p[0] for p in PASSES])
def test_pass_command_per_agent_and_all_agents(cli, seeded, args) -> None:  # type: ignore[no-untyped-def]
    one = parse(cli(*args, "--agent", "support-bot", json_=True))
    assert [r["agent_id"] for r in one] == ["support-bot"] and isinstance(one[0]["report"], dict)
    table = cli(*args, "--all-agents")
    assert table.exit_code == 0, table.output
    for agent in ("coding-assistant", "research-agent", "support-bot", "travel-assistant"):
        assert agent in table.stdout


@pytest.mark.slow
def test_corpus_merge_dry_run_then_apply(cli, seeded) -> None:  # type: ignore[no-untyped-def]
    assert cli("consolidate-corpus", "--agent", "support-bot").exit_code == 0
    applied = parse(cli("consolidate-corpus", "--agent", "support-bot", "--apply", json_=True))
    assert applied[0]["agent_id"] == "support-bot"
    bad = cli("consolidate-corpus", "--agent", "support-bot", "--plan-id", "p1")
    assert bad.exit_code == 1 and "--plan-id is only used with --apply" in bad.stderr


def test_health_plot_writes_a_chart(cli, seeded, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "health.png"
    assert cli("health", "--agent", "travel-assistant", "--plot", str(out)).exit_code == 0
    assert out.stat().st_size > 0


def test_health_chart_colours_read_at_a_glance(cli, seeded, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The best tier is green, not red; each tier is drawn in its own colour and named with its range."""
    from matplotlib import image
    from matplotlib.colors import to_rgb

    from engram_pipeline.lifecycle.health import TIER_COLOURS, tier_label

    red, green, blue = to_rgb(TIER_COLOURS["hot"])
    assert green > red and green > blue  # the most trusted tier reads as good
    assert len(set(TIER_COLOURS.values())) == 4 and TIER_COLOURS["archive"] != TIER_COLOURS["hot"]
    assert [tier_label(t) for t in TIER_COLOURS] == ["hot > 0.85", "warm 0.70-0.85", "cold 0.40-0.70", "archive < 0.40"]
    out = tmp_path / "chart.png"
    assert cli("health", "--agent", "coding-assistant", "--plot", str(out)).exit_code == 0
    pixels = {tuple(round(float(c), 2) for c in px[:3]) for row in image.imread(out) for px in row}
    for tier in ("hot", "warm"):  # the sample agent has hot and warm memories: their bars are drawn
        assert tuple(round(c, 2) for c in to_rgb(TIER_COLOURS[tier])) in pixels, tier
    assert tuple(round(c, 2) for c in to_rgb("#d62728")) not in pixels  # no red anywhere


def test_maintain_and_agent_selection(cli, seeded) -> None:  # type: ignore[no-untyped-def]
    report = parse(cli("maintain", json_=True))
    assert "memories" in report["tables"]
    both = cli("decay", "--agent", "x", "--all-agents")
    assert both.exit_code == 1 and "not both" in both.stderr


def test_consolidate_rejects_an_unknown_scope(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("consolidate", "--agent", "a", "--scope", "partial")
    # a choice: refused by the parser (usage error, exit 2) with the choices listed
    assert result.exit_code == 2 and "'partial' is not one of" in result.output and "'full'" in result.output


def test_demo_imports_the_sample_and_recalls_per_agent(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("demo", "--import-only")
    assert result.exit_code == 0, result.output
    for agent in ("coding-assistant", "travel-assistant", "support-bot", "research-agent"):
        assert f"[{agent}] recall" in result.stdout
    assert "reusing the store" in cli("demo", "--import-only").stdout  # one demo: assets.demo, which reuses it


def test_apply_without_plan_id_refuses_a_plan_made_after_the_review_and_names_both(cli, db) -> None:  # type: ignore[no-untyped-def]
    from engram_pipeline.lifecycle.corpus_merge import consolidate_corpus
    from tests.api.api_helpers import reviewed_plan_then_late_duplicate

    store = MemoryStore.open(db, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    ids = reviewed_plan_then_late_duplicate(store, "alice")
    later = str(consolidate_corpus(store, "alice").plan_id)  # expires the reviewed plan
    before = (store.engine.memories.version, store.engine.plans.table.count_rows())
    several = cli("consolidate-corpus", "--agent", "alice", "--apply")
    assert several.exit_code == 1 and f"one pending corpus-merge plan, {later}, made after" in several.stderr
    assert ids["reviewed"] in several.stderr
    expired = cli("consolidate-corpus", "--apply", "--plan-id", ids["reviewed"])
    assert expired.exit_code == 1 and expired.stderr.startswith(
        f"error: corpus-merge plan {ids['reviewed']} expired: plan {later} was made after it"
    )
    unknown = cli("consolidate-corpus", "--agent", "alice", "--apply", "--plan-id", "plan-nope")
    assert unknown.exit_code == 1 and unknown.stderr.strip().splitlines() == [
        "error: no corpus-merge plan 'plan-nope'; a dry run of the corpus merge stores one and returns its id"
    ]
    assert (store.engine.memories.version, store.engine.plans.table.count_rows()) == before  # nothing applied
    applied = parse(cli("consolidate-corpus", "--agent", "alice", "--apply", "--plan-id", later, json_=True))
    assert applied[0]["report"]["merged"] == 2


def test_review_apply_with_a_rejected_cluster_and_discard(cli, db) -> None:  # type: ignore[no-untyped-def]
    from tests.api.api_helpers import two_clusters

    store = MemoryStore.open(db, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    ids = two_clusters(store, "alice")
    (pid,) = ids["plan"]
    review = cli("consolidate-corpus", "--agent", "alice")  # the same plan, printed with its numbers
    assert review.exit_code == 0 and f"plan {pid} of agent alice:" in review.stdout
    lines = review.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["cluster", "role"])
    assert [line.split()[:2] for line in lines[header + 1 : header + 5]] == [
        ["1", "canonical"], ["1", "member"], ["2", "canonical"], ["2", "member"]
    ]  # fmt: skip
    before = store.engine.memories.version
    for args, needle in (
        (("--reject", "2"), "--reject numbers the clusters of one reviewed plan: give --apply --plan-id too"),
        (("--apply", "--plan-id", pid, "--reject", "two"), "--reject takes cluster numbers separated by commas"),
        (("--apply", "--plan-id", pid, "--reject", "2,3"), f"plan {pid} has 2 clusters (numbered 1 to 2)"),
    ):  # fmt: skip
        bad = cli("consolidate-corpus", *args)
        assert bad.exit_code == 1 and needle in bad.stderr, bad.stderr
    assert store.engine.memories.version == before  # nothing written
    applied = cli("consolidate-corpus", "--apply", "--plan-id", pid, "--reject", "2")
    assert applied.exit_code == 0, applied.output
    assert "rejected" in applied.stdout and "merged" in applied.stdout
    rows = {r["id"]: r for r in store.list_memories("alice")}
    assert all(rows[i]["status"] == "active" for i in ids["2"]) and rows[ids["1"][1]]["superseded_by"] == ids["1"][0]
    events = store.engine.audit_for_agent("alice", actions=["reject_merge"]).to_pylist()
    assert sorted(e["memory_id"] for e in events) == sorted(ids["2"]) and {e["actor"] for e in events} == {"cli"}
    again = parse(cli("consolidate-corpus", "--agent", "alice", json_=True))[0]["report"]
    assert again["clusters"] == 0  # the rejected cluster is not proposed again

    other = str(store.engine.save_plan("alice", store.engine.get_plan(pid)["body"]))  # type: ignore[index]
    discarded = parse(cli("discard-plan", other, json_=True))
    assert discarded == [
        {"agent_id": "alice", "report": {"plan_id": other, "agent_id": "alice", "status": "discarded", "clusters": 2,
                                         "discarded": True}}
    ]  # fmt: skip
    refused = cli("consolidate-corpus", "--apply", "--plan-id", other)
    assert refused.exit_code == 1 and f"plan {other} was discarded by cli at" in refused.stderr
    assert cli("discard-plan", pid).exit_code == 1  # applied: restore is the way back
    assert "no corpus-merge plan 'plan-nope'" in cli("discard-plan", "plan-nope").stderr


def test_apply_without_plan_id_takes_the_only_pending_plan_and_says_which(cli, db) -> None:  # type: ignore[no-untyped-def]
    from tests.api.api_helpers import CANONICAL, near_duplicate

    store = MemoryStore.open(db, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    near_duplicate(store, "alice", CANONICAL, 1.0, seed=0, importance=0.9)
    near_duplicate(store, "alice", "Deploy runs every night at two", 0.92, seed=1)
    plan = parse(cli("consolidate-corpus", "--agent", "alice", json_=True))[0]["report"]["plan_id"]
    applied = cli("consolidate-corpus", "--agent", "alice", "--apply", json_=True)
    assert applied.exit_code == 0 and f"agent alice: applying {plan}, its only pending plan" in applied.stderr
    assert parse(applied)[0]["report"]["merged"] == 1


def test_migrate_reshards_and_says_to_set_the_count(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("remember", "--agent", "alice", "User lives in Berlin").exit_code == 0
    done = cli("migrate", "--shards", "4")
    assert done.exit_code == 0, done.output
    assert "ENGRAM_SHARDS=4" in done.stderr and "4" in done.stdout
    refused = cli("agents")  # the runner's ENGRAM_SHARDS is still the default, 1
    assert refused.exit_code == 1 and "has 4 shard(s)" in refused.stderr and "ENGRAM_SHARDS=4" in refused.stderr
    back = cli("migrate", "--shards", "1", json_=True)
    assert back.exit_code == 0 and '"target": 1' in back.stdout
    assert "alice" in cli("agents").stdout
