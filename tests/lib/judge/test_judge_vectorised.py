"""The write-time checks of many pairs at once decide exactly what the checks of one pair at a time decided.

The references are the scalar paths as the write path ran them before the batch: :func:`features` per pair,
the logistic on a one-row matrix, ``same_claims`` and ``conflict`` per pair, and :func:`detect_contradiction`
on every pair. The pairs: held-out and calibration STS pairs (with the hashing embedder's cosines), random
pairs of the write benchmark's sentences, and pairs of claims written the way agents write them.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from engram_pipeline.claims import contradiction_slots, detect_contradiction, detect_contradictions
from engram_pipeline.embed import get_embedder
from engram_pipeline.judge import CalibratedJudge, Pair, feature_matrix, features, make_judge, same_claims
from engram_pipeline.merge_guard import conflict
from engram_pipeline.settings import Settings
from tests.lib.judge.test_judge_merges import TEXTS

STS = Path(__file__).resolve().parents[3] / "bench" / "data" / "sts"
WORDS = [
    "build",
    "lockfile",
    "deploy",
    "travel",
    "flight",
    "hotel",
    "refund",
    "login",
    "session",
    "cookie",
    "paper",
    "protein",
    "search",
    "editor",
    "python",
    "berlin",
    "munich",
    "meeting",
    "invoice",
    "export",
    "timeout",
    "docker",
    "disk",
    "test",
    "ci",
    "release",
    "branch",
    "review",
    "customer",
    "plan",
]
CLAIMS = [
    "User lives in {city}", "I live in {city}", "User no longer lives in {city}", "User works at {org}",
    "The user prefers {tool} for {task}", "User hates {tool}", "User uses {tool}", "User does not use {tool}",
    "Meeting with {org} is at {n}pm", "The flight to {city} leaves at {n}:15 from gate {n}",
    "Kim said she prefers {tool}", "User used to live in {city}", "My editor: {tool}", "{n} cows in {city}",
    "The {org} office is not in {city}", "User switched from {tool} to vim.",
]  # fmt: skip
FILL = {
    "city": ["Berlin", "Munich", "Bonn"],
    "org": ["Acme", "Initech"],
    "tool": ["vim", "emacs", "dark mode", "black"],
    "task": ["formatting", "the editor"],
    "n": ["3", "4", "12"],
}


def _claim_texts(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        template = rng.choice(CLAIMS)
        out.append(template.format(**{k: rng.choice(v) for k, v in FILL.items()}))
    return out


def _pairs(n_random: int = 1500) -> list[Pair]:
    rng = random.Random(12)
    texts: list[tuple[str, str]] = []
    for name in ("2016-headlines.tsv", "2016-answer-answer.tsv", "2015-images.tsv"):
        lines = [x.split("\t") for x in (STS / name).read_text(encoding="utf-8").splitlines()[:400]]
        texts += [(x[1].strip(), x[2].strip()) for x in lines if len(x) >= 3 and x[1].strip() and x[2].strip()]
    sentences = [" ".join(rng.choices(WORDS, k=rng.randint(4, 12))) + f" #{i}" for i in range(n_random)]
    texts += [(rng.choice(sentences), rng.choice(sentences)) for _ in range(n_random)]
    claims = _claim_texts(rng, 200)
    texts += [(rng.choice(claims), rng.choice(claims)) for _ in range(n_random)]
    texts += list(itertools.permutations(TEXTS, 2)) + [("", ""), ("", "the"), ("a", "A.")]
    e = get_embedder(Settings(embedder="hashing"))
    va, vb = e.embed([a for a, _ in texts]), e.embed([b for _, b in texts])
    cos = np.einsum("ij,ij->i", va, vb).tolist()
    # every pair at its own cosine and at cosines around the thresholds that decide (floor, duplicate, merge)
    out = [(a, b, c) for (a, b), c in zip(texts, cos, strict=True)]
    return out + [(a, b, rng.choice((0.35, 0.6, 0.905, 0.94, 0.99))) for a, b in texts[::3]]


PAIRS = _pairs()


def test_feature_matrix_is_features_bit_for_bit() -> None:
    assert len(PAIRS) > 4000
    expected = np.asarray([features(a, b, c) for a, b, c in PAIRS], dtype=np.float64)
    assert np.array_equal(feature_matrix(PAIRS), expected)
    assert np.array_equal(feature_matrix(PAIRS[:1]), expected[:1])


@pytest.mark.parametrize("embedder", ["hashing", "minilm"])
def test_merges_of_a_batch_are_the_scalar_decisions(embedder: str) -> None:
    judge = make_judge(Settings(judge="calibrated"), embedder)
    assert isinstance(judge, CalibratedJudge)
    mean, scale, w, bias = (np.asarray(judge.doc[k], dtype=np.float64) for k in ("mean", "scale", "weights", "bias"))

    def scalar(a: str, b: str, cos: float) -> bool:  # the write path's decision before the batch, pair by pair
        x = np.asarray([features(a, b, cos)], dtype=np.float64)
        prob = float((1.0 / (1.0 + np.exp(-(((x - mean) / scale) @ w + bias))))[0])
        likely = cos >= judge.duplicate_threshold or prob >= judge.threshold or same_claims(a, b)
        return cos >= judge.floor and likely and conflict(a, b) is None

    batch = judge.merges(PAIRS)
    assert batch == [scalar(*p) for p in PAIRS]
    assert batch == [v.merge for v in judge.judge(PAIRS)]
    assert 10 < sum(batch) < len(PAIRS) - 10  # both answers occur
    assert batch[:50] == [judge.merges([p])[0] for p in PAIRS[:50]]  # a pair alone: the same call


def test_contradictions_of_a_batch_are_the_scalar_ones() -> None:
    pairs = [(a, b) for a, b, _ in PAIRS]
    found = detect_contradictions(pairs)
    assert found == [detect_contradiction(a, b) for a, b in pairs]
    assert sum(f is not None for f in found) > 100


def test_a_contradiction_always_shares_a_slot() -> None:
    """The prefilter's promise, on every pair of the claim texts (where the rules fire most)."""
    texts = sorted(set(_claim_texts(random.Random(3), 300)) | set(TEXTS))
    fired = 0
    for a, b in itertools.combinations(texts, 2):
        if detect_contradiction(a, b) is not None:
            fired += 1
            assert contradiction_slots(a) & contradiction_slots(b), (a, b)
    assert fired > 100
