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
    assert import_jsonl(store, load_sample_corpus()).errors == ()
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


def test_apply_without_plan_id_refuses_several_pending_plans_and_names_them(cli, db) -> None:  # type: ignore[no-untyped-def]
    from tests.api.api_helpers import merged_as_reviewed, reviewed_plan_then_late_duplicate

    store = MemoryStore.open(db, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    ids = reviewed_plan_then_late_duplicate(store, "alice")
    before = (store.memories.version, store.plans.table.count_rows())
    several = cli("consolidate-corpus", "--agent", "alice", "--apply")
    assert several.exit_code == 1 and "2 pending corpus-merge plans" in several.stderr
    assert ids["reviewed"] in several.stderr and ids["later"] in several.stderr
    unknown = cli("consolidate-corpus", "--agent", "alice", "--apply", "--plan-id", "plan-nope")
    assert unknown.exit_code == 1 and unknown.stderr.strip().splitlines() == [
        "error: no corpus-merge plan 'plan-nope'; a dry run of the corpus merge stores one and returns its id"
    ]
    assert (store.memories.version, store.plans.table.count_rows()) == before  # nothing applied
    applied = parse(cli("consolidate-corpus", "--agent", "alice", "--apply", "--plan-id", ids["reviewed"], json_=True))
    assert applied[0]["report"]["merged"] == 1 and merged_as_reviewed(store, ids)


def test_apply_without_plan_id_takes_the_only_pending_plan_and_says_which(cli, db) -> None:  # type: ignore[no-untyped-def]
    from tests.api.api_helpers import CANONICAL, near_duplicate

    store = MemoryStore.open(db, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    near_duplicate(store, "alice", CANONICAL, 1.0, seed=0, importance=0.9)
    near_duplicate(store, "alice", "Deploy runs every night at two", 0.92, seed=1)
    plan = parse(cli("consolidate-corpus", "--agent", "alice", json_=True))[0]["report"]["plan_id"]
    applied = cli("consolidate-corpus", "--agent", "alice", "--apply", json_=True)
    assert applied.exit_code == 0 and f"agent alice: applying {plan}, its only pending plan" in applied.stderr
    assert parse(applied)[0]["report"]["merged"] == 1
