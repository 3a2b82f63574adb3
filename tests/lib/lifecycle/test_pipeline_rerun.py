"""A shard's pipeline swept again a few minutes later ends where one sweep at that later time ends.

This is what the retry of a run whose Celery worker died does (issue 38, ``tests/deploy/test_worker_death.py``):
the retry is a new run, with its own ``now``, so the stages the killed run had finished run again, and the rows
they had written are written again (the retry leaves rows at a higher ``version`` than an uninterrupted run).
The question that figure raises is whether a second write is a second *application*: it is not. Importance is
a function of the row's inputs and ``now`` (``engram_pipeline/scoring.py``), never of the stored importance,
and confidence decays by the time elapsed since the row's ``decayed_at``, so after sweeps at t1 then t2 every
row that was there before has the importance and confidence of one sweep at t2 (confidence up to the
neighbours' competition read at t1). What does differ from one sweep is what the second sweep of any run
would do: its decay re-scores, and its contradiction stage may flag, the rows the first sweep's consolidation
stage derived after those stages had run. Two sweeps at t1 then t2 equal two sweeps at t2 (statuses, tiers,
importance, confidence, audit events), and only the write counts (versions) differ.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engram_pipeline.importer import import_jsonl
from engram_pipeline.lifecycle.sweep import sweep
from engram_pipeline.sample import load_sample_corpus
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

pytestmark = pytest.mark.slow

CORPUS_AT = datetime(2026, 6, 1, 12, tzinfo=UTC)
KILLED_RUN = CORPUS_AT + timedelta(minutes=1)  # the run whose worker died had finished some stages at this now
RETRY = KILLED_RUN + timedelta(minutes=5)  # its retry, a new run: a new now
COMPARED = ("status", "tier", "pinned", "importance", "superseded_by", "access_count", "reinforcement_count")


def rows(store: MemoryStore) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every row by (agent, kind, content): derived rows get fresh ids in each store."""
    table = store.engine.memories.search().limit(None).to_arrow().to_pylist()
    key = {r["id"]: (r["agent_id"], r["kind"], r["content"]) for r in table}
    out = {}
    for r in table:
        out[key[r["id"]]] = {**r, "superseded_by": key.get(r["superseded_by"], r["superseded_by"])}
    return out


def events(store: MemoryStore, key: dict[str, Any]) -> Counter[Any]:
    audit = store.engine.audit.table.search().limit(None).to_arrow().to_pylist()
    return Counter((str(key.get(a["memory_id"], a["memory_id"])), a["action"]) for a in audit)


def test_a_sweep_run_again_later_ends_as_one_sweep_at_that_time(tmp_path: Path, settings: Settings) -> None:
    lines = load_sample_corpus(CORPUS_AT)
    twice = MemoryStore.open(str(tmp_path / "twice"), settings=settings)
    once = MemoryStore.open(str(tmp_path / "once"), settings=settings)
    for store in (twice, once):
        import_jsonl(store, lines, checks="exact")
    agents = once.agents()
    sweep(twice, "pipeline", agents, now=KILLED_RUN)
    sweep(twice, "pipeline", agents, now=RETRY)
    sweep(once, "pipeline", agents, now=RETRY)
    one_sweep = rows(once)
    derived = {k for k, r in one_sweep.items() if r["source"] == "derived"}
    ours = rows(twice)
    # No second application: every imported row has the importance and confidence of one sweep at the later time.
    for key, row in one_sweep.items():
        if key not in derived:
            assert row["importance"] == ours[key]["importance"], key
            assert abs(row["confidence"] - ours[key]["confidence"]) <= 1e-4, key

    # The rest is what the next run does anyway: it sees the rows the consolidation stage derived after the
    # decay and contradiction stages had run (decay re-scores them, a contradiction with one may be flagged).
    sweep(once, "pipeline", agents, now=RETRY)
    theirs = rows(once)
    assert ours.keys() == theirs.keys()
    for key, row in ours.items():
        exact = COMPARED if key not in derived else tuple(c for c in COMPARED if c != "importance")
        assert {c: row[c] for c in exact} == {c: theirs[key][c] for c in exact}, key
        # A derived row is 5 minutes older in the twice-swept store (born in the first sweep): the recency of its
        # importance is that much lower (14-day half-life: 6e-5 at 0.35).
        assert abs(row["importance"] - theirs[key]["importance"]) <= 1e-4, key
        assert abs(row["confidence"] - theirs[key]["confidence"]) <= 1e-4, key
        assert json.loads(row["importance_factors"])["scored_at"] == RETRY.isoformat(), key
    rewritten = sum(ours[k]["version"] > theirs[k]["version"] for k in ours)
    assert rewritten > 0  # the second sweep wrote again: the versions differ, as after a retry
    assert all(ours[k]["version"] >= theirs[k]["version"] for k in ours)

    ids = {r["id"]: k for k, r in ours.items()}, {r["id"]: k for k, r in theirs.items()}
    assert events(twice, ids[0]) - Counter(a for a in events(twice, ids[0]) if a[1] == "decay") == events(
        once, ids[1]
    ) - Counter(a for a in events(once, ids[1]) if a[1] == "decay")
