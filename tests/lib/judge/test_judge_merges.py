"""``CalibratedJudge.merges`` (the write path's cheaper question) answers exactly what ``judge`` decides."""

from __future__ import annotations

import itertools

import pytest

from engram_pipeline.judge import CalibratedJudge, make_judge
from engram_pipeline.settings import Settings

TEXTS = [
    "User lives in Berlin", "The user lives in Berlin", "I reside in Berlin", "User lives in Munich",
    "User does not live in Berlin", "User prefers dark mode in the editor", "I prefer dark mode in the editor",
    "User prefers light mode", "Meeting with the design team is at 3pm", "Meeting with the design team is at 4pm",
    "A man is playing a guitar", "A man is not playing a guitar", "A woman is playing a guitar",
    "The flight leaves at 9:15 from gate 12", "The 9:15 flight departs from gate 21", "User likes green tea",
    "User likes black tea", "User hates green tea", "Cows grazing in a field", "Five cows grazing in a field",
]  # fmt: skip
COSINES = (0.2, 0.36, 0.5, 0.66, 0.8, 0.9, 0.96, 0.99)


@pytest.mark.parametrize("embedder", ["hashing", "minilm"])
def test_merges_agrees_with_judge_on_every_pair(embedder: str) -> None:
    judge = make_judge(Settings(judge="calibrated"), embedder)
    assert isinstance(judge, CalibratedJudge)
    pairs = [(a, b, cos) for a, b in itertools.permutations(TEXTS, 2) for cos in COSINES]
    assert judge.merges(pairs) == [v.merge for v in judge.judge(pairs)]
    assert any(judge.merges(pairs)) and not all(judge.merges(pairs))
