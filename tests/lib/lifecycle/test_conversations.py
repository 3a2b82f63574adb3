"""Consolidation on the hand-written conversations: the beliefs and procedures a careful reader derives."""

from __future__ import annotations

import pytest

from engram_pipeline.importer import import_jsonl
from engram_pipeline.lifecycle.consolidation import consolidate
from engram_pipeline.store import MemoryStore
from tests.corpora import conversations as cv


def derived(store: MemoryStore, agent: str, kind: str) -> list[dict]:
    return [r for r in store.list_memories(agent, kind=kind) if r["source"] == "derived"]


@pytest.mark.slow
def test_beliefs_and_procedures_from_real_looking_episodes(store: MemoryStore) -> None:
    # exact dedup only: the episodes as the corpus gives them (write-time collapses would thin the evidence)
    assert import_jsonl(store, cv.import_lines(), checks="exact").errors == ()
    totals = {"beliefs": [0, 0, 0], "procedures": [0, 0, 0]}
    for agent in cv.EPISODES:
        consolidate(store, agent, scope="full")
        for kind, table, labels, match in (
            ("beliefs", "semantic", cv.BELIEFS, cv.belief_match),
            ("procedures", "procedural", cv.PROCEDURES, cv.procedure_match),
        ):
            counts = cv.score(derived(store, agent, table), labels[agent], match)
            totals[kind] = [t + c for t, c in zip(totals[kind], counts, strict=True)]
    tp, found, labelled = totals["beliefs"]
    # 12 of the 15 labelled beliefs, nothing else (misses: a hedged "I think I like jazz" weighs half a vote,
    # "drink" is no relation the parser reads, "meetings before 10am" / "early meetings" are other words)
    assert tp / found >= 0.9 and tp / labelled >= 0.75, totals
    assert totals["procedures"][0] == totals["procedures"][1] == totals["procedures"][2], totals
    before = {r["id"]: r["version"] for a in cv.EPISODES for r in store.list_memories(a)}
    for agent in cv.EPISODES:
        again = consolidate(store, agent, scope="full")
        assert (again.beliefs_created, again.beliefs_reinforced, again.procedures_created) == (0, 0, 0)
    assert {r["id"]: r["version"] for a in cv.EPISODES for r in store.list_memories(a)} == before
