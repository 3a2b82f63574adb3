"""What every judge shares: the labels, the candidate pair, the verdict and the interface the passes use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engram_pipeline.claims import Contradiction, detect_contradictions

LABELS = ("duplicate", "contradiction", "distinct")

Pair = tuple[str, str, float]
"""``(text_a, text_b, cosine)``: a candidate pair as the neighbour graph or a vector search found it."""


@dataclass(frozen=True)
class Verdict:
    """A judge's call on one pair: ``label`` in :data:`LABELS`, ``score`` (the judge's probability or the
    cosine) and a reason a reviewer reads in the merge plan."""

    label: str
    score: float
    reason: str

    @property
    def merge(self) -> bool:
        return self.label == "duplicate"


@runtime_checkable
class Judge(Protocol):
    """What the passes need from a judge: a ``name`` (reported in plans), the lowest cosine it wants
    candidates from (``floor``), and a verdict per pair, in order."""

    @property
    def name(self) -> str: ...

    @property
    def floor(self) -> float: ...

    @property
    def duplicate_threshold(self) -> float:
        """At or above this cosine a pair without a veto is a duplicate (``MEMORY_DUPLICATE_THRESHOLD``)."""
        ...

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]: ...

    def merges(self, pairs: Sequence[Pair]) -> list[bool]: ...

    def contradictions(self, pairs: Sequence[Pair]) -> list[Contradiction | None]: ...


def rule_contradictions(pairs: Sequence[Pair]) -> list[Contradiction | None]:
    """The contradiction rules' hits (:func:`engram_pipeline.claims.detect_contradictions`): what a judge
    without a model flags."""
    return detect_contradictions([(a, b) for a, b, _ in pairs])
