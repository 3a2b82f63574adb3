"""The write-time decisions on new rows and their candidates, for many rows at once.

Each new row meets its candidates (its nearest visible rows, each with ``_similarity``, nearest first): the
first candidate the store's merge judge calls the same fact (:func:`engram_pipeline.judge.same_fact`) is the
row it collapses into; failing one, the candidates in the contradiction bands that the judge finds it contradicting
(:func:`engram_pipeline.judge.contradictions_of`: the contradiction rules, and the pair model's verdicts where it
judges) are recorded. :func:`decide_many` asks
both questions of every pair of a batch in one call each (the judge's features and the contradiction prefilter
are computed for all pairs at once), with the same answers as asking pair after pair.

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> row = {"content": "User lives in Munich", "kind": "semantic"}
>>> old = {"content": "User lives in Berlin", "kind": "semantic", "_similarity": 0.8}
>>> same, found = decide_many(store.engine, [(row, [old])])[0]
>>> same is None, [hit.rule for _, hit in found]
(True, ['value_swap'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engram_pipeline.judge import are_same_facts, contradictions_of, get_judge
from engram_pipeline.model import Memory
from engram_pipeline.similarity.bands import contradiction_bands, in_bands

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine

Found = list[tuple[Memory, Any]]
"""The candidates a new row contradicts, each with the rule's hit."""


def near_cosine(store: Engine) -> float:
    """The lowest cosine at which a pair of rows matters to a write: the judge's floor, or the contradiction
    band's start, or the duplicate threshold."""
    s = store.settings
    return min(get_judge(store).floor, s.contradiction_threshold, s.duplicate_threshold)


def decide_many(store: Engine, cases: Sequence[tuple[Memory, Sequence[Memory]]]) -> list[tuple[Memory | None, Found]]:
    """For each ``(row, candidates)``: the first candidate the judge calls the same fact as ``row`` and no
    contradictions, or ``None`` and the candidates the contradiction rules find ``row`` contradicts."""
    # Below this cosine neither the judge nor the contradiction band acts (engram_pipeline/judge/: "below the
    # floor a pair is distinct"): the pairs under it are not worth judging.
    floor = near_cosine(store)
    cases = [(row, [n for n in candidates if n["_similarity"] >= floor]) for row, candidates in cases]
    flat = [(i, n) for i, (_, candidates) in enumerate(cases) for n in candidates]
    # The corpus merge's judge decides (engram_pipeline/judge/); its hard vetoes (contradiction, negation,
    # numbers, ...) keep a near-identical sentence that says something else from being lost.
    merges = are_same_facts(
        get_judge(store),
        [(n["content"], cases[i][0]["content"], n["_similarity"]) for i, n in flat],
        [(n["kind"], cases[i][0]["kind"]) for i, n in flat],
    )
    same: dict[int, Memory] = {}
    for (i, n), merge in zip(flat, merges, strict=True):
        if merge:
            same.setdefault(i, n)
    # A vetoed duplicate is checked too: an embedder can score "lives in Berlin" / "lives in Munich" above the
    # duplicate threshold, and that contradiction must not go unrecorded.
    bands = contradiction_bands(store.settings)
    banded = [(i, n) for i, n in flat if i not in same and in_bands(n["_similarity"], bands)]
    hits = contradictions_of(
        get_judge(store),
        [(cases[i][0]["content"], n["content"], n["_similarity"]) for i, n in banded],
        [(cases[i][0]["kind"], n["kind"]) for i, n in banded],
    )
    found: list[Found] = [[] for _ in cases]
    for (i, n), hit in zip(banded, hits, strict=True):
        if hit is not None:
            found[i].append((n, hit))
    return [(same[i], []) if i in same else (None, found[i]) for i in range(len(cases))]
