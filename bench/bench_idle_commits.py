"""Commits an idle run makes, per pass: table versions of every store table before and after each pass.

An "idle" agent has had every pass run once already and nothing changed since; a second run of any pass has
nothing to do. Every commit creates a table version, so the versions added are the commits the run made.

    PYTHONPATH=. python bench/bench_idle_commits.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from results import Results  # bench/results.py

from engram_pipeline.lifecycle import (
    consolidate,
    consolidate_corpus,
    decay_confidence,
    decay_importance,
    detect_contradictions,
    promote_stm,
)
from engram_pipeline.model import utcnow
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore


def commits(store: MemoryStore, run: Callable[[], Any]) -> dict[str, int]:
    before = store.engine.table_versions()
    run()
    after = store.engine.table_versions()
    return {name: after[name] - before[name] for name in before if after[name] != before[name]}


def passes(store: MemoryStore, agent: str) -> dict[str, Callable[[Any], Any]]:
    """Every per-agent pass, each a function of the run's ``now``."""
    return {
        "promotion": lambda now: promote_stm(store, agent, now=now),
        "importance decay": lambda now: decay_importance(store, agent, now=now),
        "confidence decay": lambda now: decay_confidence(store, agent, now=now),
        "contradictions": lambda now: detect_contradictions(store, agent, now=now),
        "corpus merge plan": lambda now: consolidate_corpus(store, agent, dry_run=True, now=now),
        "corpus merge apply": lambda now: consolidate_corpus(store, agent, dry_run=False, now=now),
        "consolidation": lambda now: consolidate(store, agent, now=now),
        "maintenance": lambda now: store.maintain(),
    }


def main() -> None:
    results = Results("idle_commits", argparse.Namespace(check="--check" in sys.argv))
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(f"{tmp}/store", settings=Settings().replace(embedder="hashing"))
        agent = "idle-agent"
        for text in ("User lives in Berlin", "User prefers tea", "Deploys go out on Fridays"):
            store.remember(agent, text)
        now = utcnow()
        every = passes(store, agent)
        for run in every.values():
            run(now)  # the first run may have work
        total = 0
        print(f"{'pass':20s} {'same now':>9s} {'+5 min':>7s}  tables written (+5 min)")
        for name, run in every.items():
            same = commits(store, lambda run=run: run(now))
            later = commits(store, lambda run=run: run(now + timedelta(minutes=5)))
            total += sum(same.values())
            print(f"{name:20s} {sum(same.values()):9d} {sum(later.values()):7d}  {later}")
            results.add(
                "passes", name=name, same_now=sum(same.values()), plus_5_min=sum(later.values()), tables_written=later
            )
        print(f"{'all passes':20s} {total:9d}")
        results.add("all_passes", same_now=total)
        results.save()
        if "--check" in sys.argv and total:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
