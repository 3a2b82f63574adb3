"""What the store's write verbs return."""

from __future__ import annotations

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
