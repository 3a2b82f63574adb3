"""The merge decision: the band rule, the hard vetoes and the lexical agreement, case by case."""

from __future__ import annotations

import pytest

from engram_pipeline.embed import load_profile
from engram_pipeline.merge_guard import (
    MIN_CONTAINMENT,
    MergeDecision,
    conflict,
    containment,
    is_duplicate,
    merge_decision,
    negations,
    values,
)
from engram_pipeline.settings import Settings

S = Settings(merge_threshold=0.80, duplicate_threshold=0.95)


@pytest.mark.parametrize(
    ("a", "b", "similarity", "merge", "reason"),
    [
        # the band
        ("User lives in Berlin", "The user lives in Berlin", 0.79, False, "below merge band"),
        ("User lives in Berlin", "The user lives in Berlin", 0.80, True, "merge band"),
        ("User lives in Berlin", "The user lives in Berlin", 0.949, True, "merge band"),
        ("User lives in Berlin", "The user lives in Berlin.", 0.95, True, "duplicate"),
        # the contradiction detector
        ("User lives in Berlin", "User lives in Munich", 0.90, False, "contradiction, value swap"),
        ("User prefers dark mode", "User prefers light mode", 0.97, False, "contradiction"),
        # negation
        ("A man is playing a guitar", "A man is not playing a guitar", 0.90, False, "veto"),
        ("The dog does not bark", "The dog barks", 0.97, False, "veto"),
        ("I don't see a problem", "I don't see why that is not a problem", 0.90, False, "negation differs"),
        ("User never drinks coffee", "The user never drinks coffee", 0.90, True, "merge band"),
        # numbers, dates, months, weekdays
        ("Flight leaves at 9:15 from gate 12", "The 9:15 flight departs from gate 21", 0.90, False, "12 vs 21"),
        ("Cows grazing in a snowy field", "Five cows grazing in a snowy field", 0.90, False, "- vs 5"),
        ("Standup moved to Friday", "The standup was moved to Monday", 0.90, False, "friday vs monday"),
        ("User owns 3 cats", "The user owns three cats", 0.90, True, "merge band"),
        ("One man is singing", "A man is singing", 0.90, True, "merge band"),
        # closed classes and opposites
        ("User drives a red car", "User drives a blue car", 0.90, False, "colours differ"),
        ("A woman is slicing onions", "A man is slicing onions", 0.90, False, "genders differ"),
        ("Stocks close higher on news", "Stocks close lower on news", 0.90, False, "opposite words"),
        # lexical agreement
        ("Meeting notes for the budget review", "Budget review meeting notes", 0.85, True, "containment 1.00"),
        ("Weather is nice today in town", "Lovely sunny afternoon outside", 0.85, False, "little shared content"),
    ],
)
def test_merge_decision_table(a: str, b: str, similarity: float, merge: bool, reason: str) -> None:
    decision = merge_decision(a, b, similarity, S)
    assert isinstance(decision, MergeDecision)
    assert decision.merge is merge, decision.reason
    assert reason in decision.reason
    assert merge_decision(b, a, similarity, S).merge is merge, "the decision is symmetric"


def test_decision_is_frozen() -> None:
    decision = merge_decision("a b", "a b c", 0.9, S)
    with pytest.raises(AttributeError):
        decision.merge = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("a", "b", "similarity", "expected"),
    [
        ("User lives in Berlin", "The user lives in Berlin", 0.96, True),
        ("User lives in Berlin", "The user lives in Berlin", 0.94, False),  # below the duplicate threshold
        ("User lives in Berlin", "User lives in Munich", 0.99, False),  # the detector fires
        ("A man is playing a guitar", "A man is not playing a guitar", 0.99, False),
        ("Room 101 is booked", "Room 102 is booked", 0.99, False),
        # a duplicate needs no lexical agreement beyond the hard vetoes
        ("Standup at ten", "Daily meeting at ten", 0.99, True),
    ],
)
def test_is_duplicate(a: str, b: str, similarity: float, expected: bool) -> None:
    assert is_duplicate(a, b, similarity, S) is expected


def test_the_band_follows_the_shipped_profiles() -> None:
    for kind in ("hashing", "minilm", "openai"):
        s = Settings().with_profile(load_profile(kind))
        inside = (s.merge_threshold + s.duplicate_threshold) / 2
        a, b = "User prefers tea in the morning", "The user prefers tea in the morning"
        assert merge_decision(a, b, inside, s).merge
        assert not merge_decision(a, b, s.merge_threshold - 0.001, s).merge
        assert is_duplicate(a, b, s.duplicate_threshold, s)


def test_helpers() -> None:
    assert negations("I can't say it isn't never") == ("n't", "n't", "never")
    assert negations("User likes tea") == ()
    assert values("Paid 1,200 on March 3rd, at 9:15; two tickets") == {"1200", "march", "3", "9:15", "2"}
    assert containment("budget review notes", "notes of the budget review meeting") == 1.0
    assert containment("", "") == 1.0 and containment("tea", "") == 0.0
    assert 0 < MIN_CONTAINMENT < 1
    assert conflict("User lives in Berlin", "The user lives in Berlin") is None
