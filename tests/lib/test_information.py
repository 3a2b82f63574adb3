"""The information score: what it reads, that the shipped weights reproduce their recorded figures, that the
held-out split keeps every fact and catches the chit-chat in each writing style, and that the store records it
at write time and the passes backfill it."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engram_pipeline.information import body, explain, features, information_factors, information_of, model
from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
LABELLED = ROOT / "bench" / "data" / "information" / "labelled.jsonl"
THRESHOLD = Settings().noise_threshold


def labelled(split: str | None = None) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if split is None or r["split"] == split]


def test_the_labelled_set_has_200_of_each_in_three_styles_and_a_fixed_split() -> None:
    rows = labelled()
    for label in ("fact", "noise"):
        mine = [r for r in rows if r["label"] == label]
        assert len(mine) >= 200
        assert {r["style"] for r in mine} == {"first", "third", "dialogue"}
        assert all(sum(r["style"] == s for r in mine) >= 60 for s in ("first", "third", "dialogue"))
    assert len({r["text"] for r in rows}) == len(rows)
    assert {r["split"] for r in rows} == {"train", "test"} and len(labelled("test")) >= 100


@pytest.mark.parametrize("style", ["first", "third", "dialogue"])
def test_held_out_facts_are_kept_and_chit_chat_is_caught(style: str) -> None:
    rows = [r for r in labelled("test") if r["style"] == style]
    scores = information_of([r["text"] for r in rows])
    facts = [s for r, s in zip(rows, scores, strict=True) if r["label"] == "fact"]
    noise = [s for r, s in zip(rows, scores, strict=True) if r["label"] == "noise"]
    assert min(facts) >= THRESHOLD, "a held-out fact would be noise"
    assert sum(s < THRESHOLD for s in noise) / len(noise) >= 0.9


def test_the_shipped_figures_are_what_the_weights_give() -> None:
    shipped = json.loads((ROOT / "engram_pipeline" / "data" / "information.json").read_text(encoding="utf-8"))
    assert shipped["version"] == model().version and shipped["threshold"] == THRESHOLD
    test = labelled("test")
    scores = information_of([r["text"] for r in test])
    noise = [r["label"] == "noise" for r in test]
    called = [s < THRESHOLD for s in scores]
    caught = sum(c and n for c, n in zip(called, noise, strict=True))
    assert round(caught / sum(noise), 4) == shipped["figures"]["test"]["all"]["noise_recall"]
    assert round(caught / sum(called), 4) == shipped["figures"]["test"]["all"]["noise_precision"]


def test_speaker_and_context_prefixes_are_not_what_is_said() -> None:
    assert body("Session 3: Dana: I moved to Leeds.") == "I moved to Leeds."
    assert features("Dana: thanks!") == features("Sam: thanks!")


@pytest.mark.parametrize(
    "text",
    [
        "User lives in Berlin",
        "I think User prefers dark mode",
        "Dana: my flight leaves at 6:50.",
        "Kim: I adopted a beagle named Biscuit last spring.",
        "The user's son Leo is 7 years old.",
        "haha my dog Rex ate my charger again",
    ],
)
def test_plain_facts_are_not_noise(text: str) -> None:
    assert information_of([text])[0] >= THRESHOLD


@pytest.mark.parametrize("text", ["ok", "Sam: haha yes", "👍", "Thanks so much!", "User said hello.", "Bye for now."])
def test_chit_chat_is_noise(text: str) -> None:
    assert information_of([text])[0] < THRESHOLD


def test_factors_explain_the_score() -> None:
    (f,) = information_factors(["Thanks so much!"])
    assert f["information"] < THRESHOLD and f["information_model"] == model().version
    assert f["information_cues"] == explain("Thanks so much!") and len(f["information_cues"]) == 3
    assert any("phatic" in cue for cue in f["information_cues"])


def test_the_score_needs_no_embedder_and_no_torch() -> None:
    code = (
        "import sys; from engram_pipeline.information import information_of; information_of(['hi']); "
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def factors_of(row: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(row["importance_factors"]))


def test_the_score_is_recorded_at_write_time_and_follows_a_content_edit(store: MemoryStore) -> None:
    row = store.remember("a", "thanks!!", tier="ltm").memory
    f = factors_of(row)
    assert f["information"] < THRESHOLD and f["information_model"] == model().version and f["information_cues"]
    edited = store.update(row["id"], expected_version=row["version"], content="User is allergic to penicillin")
    assert factors_of(edited)["information"] >= THRESHOLD


def test_a_pass_carries_the_score_over_and_backfills_what_is_missing_or_stale(store: MemoryStore) -> None:
    now = datetime(2026, 3, 1, tzinfo=UTC)
    fresh = store.remember("a", "User lives in Berlin", tier="ltm").memory
    old = store.remember("a", "Sam: haha yes", tier="ltm").memory
    other = store.remember("a", "Dana: my sister lives in Oslo", tier="ltm").memory
    kept = factors_of(fresh)
    assert store.engine.cas_write(
        [
            {"id": old["id"], "version": old["version"], "importance_factors": None},  # written before the score
            {  # scored by another model, wrongly: the backfill re-scores it
                "id": other["id"],
                "version": other["version"],
                "importance_factors": json.dumps({"information": 0.0, "information_model": "older"}),
            },
        ],
        actor="test",
        action="t",
    ).applied
    decay_importance(store, "a", now=now)
    rows = {r["id"]: factors_of(r) for r in store.list_memories("a")}
    assert rows[old["id"]]["information"] < THRESHOLD and rows[old["id"]]["information_model"] == model().version
    assert rows[other["id"]]["information"] >= THRESHOLD and rows[other["id"]]["information_model"] == model().version
    assert {k: rows[fresh["id"]][k] for k in ("information", "information_cues")} == {
        k: kept[k] for k in ("information", "information_cues")
    }
    assert "significance" in rows[fresh["id"]]  # the pass's own factors beside it
