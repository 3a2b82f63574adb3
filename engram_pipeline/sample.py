"""The bundled sample corpus: four agents whose memories exercise every lifecycle mechanism.

Agents: a coding assistant, a travel assistant, a support bot and a research agent, 40-60 memories each, with

- episodes with outcomes in trigger-action shapes ("When the build fails with a lockfile error, run npm ci"),
  rephrased and repeated with successes and failures (procedure detection);
- user facts that change ("User lives in Berlin", later "User lives in Munich": contradictions) and repeated
  claims about the user's editor, city, employer and language (beliefs and a user-profile schema);
- rephrasings and near-duplicates (corpus merge), stale rows (old, never accessed: decay and prune), short-term
  rows with time words (promotion, expiry) and pinned rows (never pruned).

Times are stored as offsets from "now" (``created_days_ago``, ``last_accessed_days_ago``) so the corpus never
ages: :func:`generate_sample_corpus` and :func:`load_sample_corpus` turn them into import lines with absolute
times. ``engram_pipeline/data/sample_corpus.jsonl`` is written by ``python -m engram_pipeline.sample`` and a
test checks that it matches the generator.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from engram_pipeline.model import utcnow
from engram_pipeline.sample_data import AGENTS  # re-exported: the demo and the benchmarks read it

SAMPLE_FILE = "sample_corpus.jsonl"
SEED = 20260101


def _offset_rows() -> list[dict[str, Any]]:
    """The corpus with times as offsets in days from now; deterministic (seeded)."""
    rng = random.Random(SEED)
    rows: list[dict[str, Any]] = []
    for agent, spec in AGENTS.items():
        out: list[dict[str, Any]] = []

        add = partial(_add, out, agent)

        # Profile claims: each variant repeated (a belief needs support); a changed fact comes later.
        for g, group in enumerate(spec["profile"]):
            # Three sayings of a long-held fact; two of a fact that changed in the last two weeks.
            base, step = (180.0 - 30 * g, 7.0) if len(group) > 2 else (rng.uniform(5, 15), 2.0)
            for i, text in enumerate(group):
                source = "user" if i % 2 == 0 else "agent"
                add(
                    text,
                    base - step * i,
                    kind="semantic",
                    source=source,
                    tier="ltm",
                    tags=["profile"],
                    access_count=rng.randint(1, 6),
                    last=rng.uniform(1, 30),
                )
        # Episodes; a third element is the trigger and action the agent recorded with the episode.
        for text, outcome, *recorded in spec["episodes"]:
            add(
                text,
                rng.uniform(2, 90),
                kind="episodic",
                outcome=outcome,
                source="agent",
                tier="ltm",
                tags=["episode"],
                access_count=rng.randint(0, 4),
                last=rng.uniform(1, 20),
                metadata=recorded[0] if recorded else None,
            )
        for text in spec["notes"]:
            add(
                text,
                rng.uniform(1, 30),
                kind="episodic",
                outcome="success",
                source="agent",
                tier="ltm",
                tags=["session"],
                access_count=rng.randint(0, 3),
                last=rng.uniform(0.5, 10),
            )
        for group in spec["near_duplicates"]:
            for text in group:
                add(
                    text,
                    rng.uniform(5, 60),
                    kind="semantic",
                    source="agent",
                    tier="ltm",
                    tags=["fact"],
                    access_count=rng.randint(0, 5),
                    last=rng.uniform(1, 10),
                )
        for text in spec["stale"]:
            ago = rng.uniform(120, 300)
            add(
                text,
                ago,
                kind="episodic",
                source="agent",
                tier="ltm",
                tags=["misc"],
                access_count=0,
                importance=0.1,
                last=ago - rng.uniform(0, 10),
            )
        for i, text in enumerate(spec["stm"]):
            # Recent enough not to have expired (STM TTL is one day); the first is accessed enough to promote.
            add(
                text,
                rng.uniform(0.05, 0.3),
                kind="episodic",
                source="user",
                tier="stm",
                tags=["today"],
                access_count=4 if i == 0 else 0,
                importance=0.7 if i == 0 else None,
                last=0.01,
            )
        for text in spec["pinned"]:
            add(
                text,
                rng.uniform(200, 365),
                kind="procedural",
                source="user",
                tier="ltm",
                tags=["rule"],
                pinned=True,
                access_count=0,
                importance=0.9,
            )
        out.sort(key=lambda r: -r["created_days_ago"])
        for n, row in enumerate(out, start=1):
            row = {"id": f"sample-{agent}-{n:03d}", **row}
            rows.append({k: v for k, v in row.items() if v is not None or k == "last_accessed_days_ago"})
    return rows


def _add(out: list[dict[str, Any]], agent: str, content: str, ago: float, **fields: Any) -> None:
    last = fields.pop("last", None)
    out.append(
        {
            "agent_id": agent,
            "content": content,
            "created_days_ago": round(ago, 3),
            "last_accessed_days_ago": None if last is None else round(min(last, ago), 3),
            **fields,
        }
    )


def _absolute(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """An offset row as an import line with ISO times relative to ``now``."""
    out = {k: v for k, v in row.items() if k not in ("created_days_ago", "last_accessed_days_ago")}
    out["created_at"] = (now - timedelta(days=row["created_days_ago"])).isoformat()
    last = row.get("last_accessed_days_ago")
    if last is not None:
        out["last_accessed_at"] = (now - timedelta(days=last)).isoformat()
    return out


def generate_sample_corpus(now: datetime | None = None) -> list[dict[str, Any]]:
    """The sample corpus as import lines (``import_jsonl`` accepts them), times relative to ``now``."""
    now = now or utcnow()
    return [_absolute(r, now) for r in _offset_rows()]


def sample_path() -> Path:
    return Path(str(resources.files("engram_pipeline").joinpath("data", SAMPLE_FILE)))


def load_sample_corpus(now: datetime | None = None, path: str | Path | None = None) -> list[dict[str, Any]]:
    """Read the committed (or an edited) offset corpus and return import lines relative to ``now``."""
    now = now or utcnow()
    with open(path or sample_path(), encoding="utf-8") as fh:
        return [_absolute(json.loads(line), now) for line in fh if line.strip()]


def offset_lines() -> Iterator[str]:
    for row in _offset_rows():
        yield json.dumps(row, ensure_ascii=False)


if __name__ == "__main__":  # python -m engram_pipeline.sample > engram_pipeline/data/sample_corpus.jsonl
    for line in offset_lines():
        print(line)
