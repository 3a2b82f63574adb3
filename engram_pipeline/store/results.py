"""What the store's write verbs take and return: a compare-and-set change and its result, a remember's result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from engram_pipeline.model import Memory

RememberOutcome = Literal["created", "exact_duplicate", "semantic_duplicate"]


@dataclass(frozen=True)
class RememberResult:
    memory: Memory
    outcome: RememberOutcome
    score: float | None = None  # similarity to the matched row of a semantic duplicate
    contradictions: tuple[dict[str, Any], ...] = field(default=())


# A change: ``id``, ``version`` (the version the caller read) and the new column values.
Change = dict[str, Any]
# Given the fresh rows of the misses, return their recomputed changes (rows that no longer need a change may
# be left out: they count as unchanged).
Recompute = Callable[[list[Memory]], list[Change]]


@dataclass(frozen=True)
class CasResult:
    applied: tuple[str, ...]
    skipped_concurrent_edit: tuple[str, ...]
    unchanged: tuple[str, ...] = ()
    commits: int = 0
    pre_images: tuple[Memory, ...] = ()  # rows as they were before the applied changes (when asked for)

    @property
    def applied_count(self) -> int:
        return len(self.applied)
