"""The pair model and its judge: verdicts on hand-written pairs in both orders, the shipped weights loading with
no network, the choice of judge and the fallback when the extra is absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram_pipeline import pair_model
from engram_pipeline.judge import CalibratedJudge, PairJudge, RulesJudge, make_judge
from engram_pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

# (case, a, b, verdict) in the styles agents write; none of these sentences is in the training data. The pair
# model shipped now gets half of them; its misses are marked (strict: a better model must update the table).
MISS = "known miss of the shipped model (docs/pair_model.md, known limits)"


def _miss(case: str, a: str, b: str, want: str) -> object:
    return pytest.param(case, a, b, want, marks=pytest.mark.xfail(strict=True, reason=MISS), id=case)


TABLE = [
    _miss("paraphrase", "Grandma moved to Valencia last spring.", "Last spring my grandmother relocated to Valencia.",
          "duplicate"),
    _miss("first / third person", "I am vegetarian.", "The user is a vegetarian.", "duplicate"),
    _miss("dialogue", "Nadia: I teach chemistry at the high school.", "Nadia teaches chemistry at the high school.",
          "duplicate"),
    _miss("added detail", "Ravi drives a Volvo.", "Ravi drives an old grey Volvo estate.", "duplicate"),
    _miss("omitted number", "Ravi bought a Volvo in 2019.", "Ravi bought a Volvo.", "duplicate"),
    ("negation", "The user eats meat.", "The user does not eat meat.", "contradiction"),
    ("antonym", "The garden gate is locked.", "The garden gate is unlocked.", "contradiction"),
    ("on / off", "The dishwasher is on.", "The dishwasher is off.", "contradiction"),
    _miss("role reversal", "Hana is mentoring Luis.", "Luis is mentoring Hana.", "contradiction"),
    _miss("swapped value", "The user's dentist is in Leeds.", "The user's dentist is in York.", "contradiction"),
    ("changed number", "The user has 3 children.", "The user has 4 children.", "contradiction"),
    ("changed date", "The rent is due on the 1st of each month.", "The rent is due on the 15th of each month.",
     "contradiction"),
    ("other subject", "Hana plays the cello.", "Luis plays the cello.", "distinct"),
    ("other topic", "The user is vegetarian.", "The deploy runs every night at two.", "distinct"),
]  # fmt: skip
ROWS = [tuple(p.values) if hasattr(p, "values") else p for p in TABLE]
CONTRADICTIONS = [(a, b) for _, a, b, want in ROWS if want == "contradiction"]


needs_model = pytest.mark.skipif(not pair_model.available(), reason="the minilm extra is not installed")


@pytest.fixture(scope="module")
def judge() -> PairJudge:
    j = make_judge(Settings(embedder="minilm"), "minilm")
    assert isinstance(j, PairJudge)
    return j


def _cosine(a: str, b: str) -> float:
    from engram_pipeline.embed import get_embedder

    va, vb = get_embedder(Settings(embedder="minilm")).embed([a, b])
    return float(va @ vb)


@needs_model
@pytest.mark.slow
@pytest.mark.parametrize(("case", "a", "b", "want"), TABLE)
def test_verdict_in_both_orders(judge: PairJudge, case: str, a: str, b: str, want: str) -> None:
    cos = max(_cosine(a, b), judge.floor)  # the pair reached the judge as a candidate
    forward, backward = judge.judge([(a, b, cos), (b, a, cos)])
    assert forward.label == backward.label == want, f"{case}: {forward.reason} / {backward.reason}"


@needs_model
@pytest.mark.slow
def test_no_contradiction_of_the_table_is_merged_in_either_order(judge: PairJudge) -> None:
    """What the misses above must not cost: a contradicting pair merged at its cosine."""
    for a, b in CONTRADICTIONS:
        cos = _cosine(a, b)
        verdicts = judge.judge([(a, b, cos), (b, a, cos)])
        assert not any(v.merge for v in verdicts), f"{a} / {b} at {cos:.3f}: {verdicts[0].reason}"


@needs_model
@pytest.mark.slow
def test_a_detail_one_side_omits_is_no_veto_but_two_stated_values_are(judge: PairJudge) -> None:
    (omitted,) = judge.judge([("Ravi bought a Volvo in 2019.", "Ravi bought a Volvo.", 0.9)])
    assert "veto" not in omitted.reason
    (stated,) = judge.judge([("Ravi bought a Volvo in 2019.", "Ravi bought a Volvo in 2021.", 0.9)])
    assert stated.label == "contradiction" and stated.reason.startswith("veto:")


@needs_model
def test_a_pair_two_stated_values_decide_is_never_read_by_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[tuple[str, str]] = []
    model = pair_model.load()
    real = model.probabilities
    monkeypatch.setattr(model, "probabilities", lambda pairs: read.extend(pairs) or real(pairs))
    fresh = make_judge.__wrapped__(Settings(embedder="minilm"), "minilm")  # its own cache: nothing read before
    stated = ("The deploy of build 12 uses the cache.", "The deploy of build 57 uses the cache.", 0.95)
    same = ("The deploy of build 12 uses the cache.", "The deploy of build 12 now uses the cache.", 0.95)
    verdicts = fresh.judge([stated, same])
    assert verdicts[0].label == "contradiction" and verdicts[0].reason.startswith("veto:")
    assert [set(p) for p in read] == [set(same[:2])]


@needs_model
@pytest.mark.slow
def test_probabilities_do_not_depend_on_order_or_batch(judge: PairJudge) -> None:
    pairs = [(a, b) for _, a, b, _ in ROWS]
    together = pair_model.load().probabilities(pairs)
    alone = pair_model.load().probabilities([pairs[3][::-1]])
    assert together.shape == (len(TABLE), 3)
    assert abs(together.sum(axis=1) - 1).max() < 1e-6
    assert abs(together[3] - alone[0]).max() < 1e-4, "both orders are averaged: the order does not matter"


@needs_model
@pytest.mark.slow
def test_the_loaded_model_computes_what_training_built(judge: PairJudge) -> None:
    """``load()`` runs the pair network on the embedder's encoder (numpy): its probabilities are those of
    ``build()``'s transformers network with the shipped weights, which training uses."""
    from importlib import resources

    import numpy as np
    from safetensors.torch import load_file

    pairs = [(a, b) for _, a, b, _ in ROWS] + [("word " * 300, "other " * 200)]  # past the 128-token limit
    net, tokenizer = pair_model.build()
    shipped = resources.files("engram_pipeline").joinpath("judges", pair_model.WEIGHTS)
    net.load_state_dict({k: v.float() for k, v in load_file(str(shipped)).items()}, strict=False)
    trained = pair_model.PairModel(net, tokenizer).probabilities(pairs)
    np.testing.assert_allclose(pair_model.load().probabilities(pairs), trained, atol=1e-5)


def test_the_shipped_card_records_its_data_and_held_out_figures() -> None:
    card = json.loads((ROOT / "engram_pipeline" / "judges" / pair_model.CARD).read_text(encoding="utf-8"))
    manifest = (ROOT / "training" / "pair_model" / "MANIFEST.json").read_bytes()
    import hashlib

    assert card["manifest_sha256"] == hashlib.sha256(manifest).hexdigest(), "the card names the manifest it used"
    files = json.loads(manifest)["files"]
    tests = {f["path"] for f in files if f["split"] == "test"}
    trains = {f["path"] for f in files if f["split"] == "train"}
    assert tests and trains and not tests & trains
    for f in files:
        path = ROOT / f["path"]
        if "sha256" in f:
            assert hashlib.sha256(path.read_bytes()).hexdigest() == f["sha256"], f["path"]
    assert 0 < card["thresholds"]["duplicate"] < 1 and 0 < card["thresholds"]["contradiction"] < 1
    assert {"msr_test_duplicate", "sick_test_contradictions"} <= set(card["figures"])
    weights = ROOT / "engram_pipeline" / "judges" / pair_model.WEIGHTS
    assert weights.stat().st_size < 30 * 2**20, "only the trained part ships, under 30 MB"


@needs_model
@pytest.mark.slow
def test_the_weights_load_with_no_network_and_no_download(tmp_path: Path) -> None:
    """In a fresh process whose sockets refuse to connect and whose Hugging Face cache is empty: the model
    loads, scores, and leaves the cache empty."""
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from engram_pipeline import pair_model\n"
        "p = pair_model.load().probabilities([('The dishwasher is on.', 'The dishwasher is off.')])\n"
        "print(int(p.argmax()))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "1", "the on/off pair is a contradiction"
    assert not any((tmp_path / "hf").rglob("*")) if (tmp_path / "hf").exists() else True


def test_the_judge_falls_back_and_says_so_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_pipeline import judge as judge_module

    monkeypatch.setattr(pair_model, "available", lambda: False)
    judge_module._pair_card.cache_clear()
    make_judge.cache_clear()
    try:
        fallback = make_judge(Settings(embedder="minilm"), "minilm")
        assert isinstance(fallback, CalibratedJudge) and fallback.name == "calibrated:all-MiniLM-L6-v2"
        with pytest.raises(ValueError, match=r"ENGRAM_JUDGE=pair.*minilm"):
            make_judge(Settings(judge="pair"), "minilm")
    finally:
        judge_module._pair_card.cache_clear()
        make_judge.cache_clear()


def test_auto_picks_the_pair_model_only_for_the_embedder_it_was_calibrated_with() -> None:
    assert not isinstance(make_judge(Settings(embedder="hashing"), "hashing"), PairJudge)
    assert isinstance(make_judge(Settings(judge="rules"), "minilm"), RulesJudge)
    if pair_model.available():
        chosen = make_judge(Settings(embedder="minilm"), "minilm")
        assert isinstance(chosen, PairJudge) and chosen.name == "pair:pair-minilm"
        explicit = Settings.from_env({"MEMORY_CONSOLIDATION_MERGE_THRESHOLD": "0.7"})
        assert make_judge(explicit, "minilm").floor == 0.7, "an explicit merge threshold is the candidate floor"
