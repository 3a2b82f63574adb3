"""The band rule as a judge: cosine at least the merge threshold, no hard veto, enough shared content."""

from __future__ import annotations

from collections.abc import Sequence

from engram_pipeline.claims import Contradiction
from engram_pipeline.judge.base import Pair, Verdict, rule_contradictions
from engram_pipeline.merge_guard import conflict, merge_decision
from engram_pipeline.settings import Settings


class RulesJudge:
    """The band rule: ``cosine >= merge_threshold``, no hard veto, containment (no upper gap: a pair at or
    above the duplicate threshold is judged like any other, with the vetoes)."""

    name = "rules"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @property
    def floor(self) -> float:
        return self._settings.merge_threshold

    @property
    def duplicate_threshold(self) -> float:
        return self._settings.duplicate_threshold

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        out = []
        for a, b, cos in pairs:
            veto = conflict(a, b) if cos >= self.floor else None  # below the floor: another topic
            if veto is not None:
                out.append(Verdict("contradiction", float(cos), f"veto: {veto}"))
                continue
            decision = merge_decision(a, b, cos, self._settings)
            out.append(Verdict("duplicate" if decision.merge else "distinct", float(cos), decision.reason))
        return out

    def merges(self, pairs: Sequence[Pair]) -> list[bool]:
        return [v.merge for v in self.judge(pairs)]

    def contradictions(self, pairs: Sequence[Pair]) -> list[Contradiction | None]:
        return rule_contradictions(pairs)
