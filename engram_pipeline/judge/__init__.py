"""Judge a pair of memories: the same fact (``duplicate``), a ``contradiction``, or ``distinct``.

Cosine similarity finds candidates; a judge decides. Every pass that folds one memory into another (write-time
dedup in ``remember`` and ``import``, the corpus-merge plan) asks :func:`get_judge` for the store's judge and
merges only the pairs it calls ``duplicate``; the write path and the contradiction pass record the
contradictions it finds (:func:`contradictions_of`). Three judges ship:

- ``pair`` (default with the MiniLM embedder when the ``minilm`` extra is installed): :class:`PairJudge`, the
  pair model of :mod:`engram_pipeline.pair_model` (a cross-encoder fine-tuned from the packaged MiniLM by
  ``training/pair_model/train.py``) reads both texts together and calls same fact, contradiction or distinct;
  the lexical vetoes stand only where both texts state a conflict;
- ``calibrated`` (the default for other embedders that ship weights, ``judges/<embedder>.json``, and the
  fallback without the extra): a logistic regression over features of the pair (the embedder's cosine,
  content-token containment and Jaccard, stemmed Jaccard, character-trigram Jaccard, length ratio, the share of
  words one side adds), trained by ``bench/train_judge.py`` on the STS 2014-2015 files and reported on the
  held-out 2016 files. It takes candidates from a lower cosine floor than the merge band (``floor`` in the
  weights file); a pair at or above ``MEMORY_DUPLICATE_THRESHOLD`` without a veto is a duplicate whatever the
  model says, and so is a pair whose texts assert the same claims (:func:`same_claims`: "User lives in Berlin"
  / "I reside in Berlin");
- ``rules``: today's band rule (:func:`engram_pipeline.merge_guard.merge_decision`): cosine at least
  ``MEMORY_CONSOLIDATION_MERGE_THRESHOLD``, no hard veto, enough shared content. The fallback for embedders
  without weights (``openai``) and for ``ENGRAM_JUDGE=rules``.

Contradictions stay out whatever the judge: a candidate pair (cosine at least the judge's floor) that the
contradiction rules or the merge guard's hard vetoes (:func:`engram_pipeline.merge_guard.conflict`:
negation, numbers, dates, swapped values, opposites) call contradicting is a ``contradiction`` verdict and is
never merged; below the floor a pair is ``distinct`` (another topic). Every report of a pass that judges
names its judge (``judge``), so a figure says which one produced it.

>>> from engram_pipeline.settings import Settings
>>> judge = RulesJudge(Settings(merge_threshold=0.7, duplicate_threshold=0.9))
>>> [v.label for v in judge.judge([("User lives in Berlin", "The user lives in Berlin", 0.8),
...                                ("User lives in Berlin", "User lives in Munich", 0.8)])]
['duplicate', 'contradiction']
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol

from engram_pipeline.claims import Contradiction
from engram_pipeline.judge.base import LABELS, Judge, Pair, Verdict, rule_contradictions
from engram_pipeline.judge.calibrated import (
    FEATURES,
    CalibratedJudge,
    feature_matrix,
    features,
    load_weights,
    same_claims,
)
from engram_pipeline.judge.pair import PairJudge
from engram_pipeline.judge.rules import RulesJudge
from engram_pipeline.merge_guard import conflict
from engram_pipeline.settings import Settings

__all__ = [
    "FEATURES", "LABELS", "CalibratedJudge", "Judge", "Pair", "PairJudge", "RulesJudge", "Verdict",
    "Configured", "are_same_facts", "contradictions_of", "feature_matrix", "features", "get_judge", "load_weights",
    "make_judge", "rule_contradictions", "same_claims", "same_fact",
]  # fmt: skip


@functools.cache
def _pair_card() -> dict[str, Any] | None:
    from engram_pipeline import pair_model

    return pair_model.card() if pair_model.available() else None


@functools.cache
def _calibrated(kind: str) -> CalibratedJudge | None:
    doc = load_weights(kind)
    return None if doc is None else CalibratedJudge(doc)


# Cached: every write asks for its store's judge once per candidate pair (settings are frozen and hashable).
@functools.lru_cache(maxsize=64)
def make_judge(settings: Settings, embedder_kind: str | None) -> Judge:
    """The judge ``ENGRAM_JUDGE`` asks for: ``auto`` (calibrated when weights ship for the embedder, else
    rules), ``calibrated`` (refused without weights) or ``rules``.

    An explicitly set ``MEMORY_CONSOLIDATION_MERGE_THRESHOLD`` becomes the calibrated judge's candidate floor;
    a pair at or above ``MEMORY_DUPLICATE_THRESHOLD`` without a veto is a duplicate for every judge.
    """
    choice = settings.judge
    if choice == "rules":
        return RulesJudge(settings)
    if choice == "pair" or (choice == "auto" and embedder_kind in PAIR_EMBEDDERS):
        card = _pair_card()
        if card is not None:
            floor = settings.merge_threshold if "MEMORY_CONSOLIDATION_MERGE_THRESHOLD" in settings.explicit else None
            screen = _calibrated(embedder_kind) if embedder_kind else None
            return PairJudge(card, duplicate_threshold=settings.duplicate_threshold, floor=floor, screen=screen)
        if choice == "pair":
            raise ValueError("ENGRAM_JUDGE=pair: the pair model needs the minilm extra (engram-pipeline[minilm])")
    judge = _calibrated(embedder_kind) if embedder_kind else None
    if judge is None:
        if choice == "calibrated":
            raise ValueError(f"ENGRAM_JUDGE=calibrated: no judge weights ship for embedder {embedder_kind!r}")
        return RulesJudge(settings)
    floor = settings.merge_threshold if "MEMORY_CONSOLIDATION_MERGE_THRESHOLD" in settings.explicit else judge.floor
    return CalibratedJudge({**judge.doc, "floor": floor}, duplicate_threshold=settings.duplicate_threshold)


# Embedders whose cosines the pair model's floor was chosen for (``auto`` picks the model only with them): the
# floor is a cosine of the packaged MiniLM.
PAIR_EMBEDDERS = ("minilm",)


class Configured(Protocol):
    """What :func:`get_judge` reads of a store: its settings and its embedder (whose ``kind`` picks weights)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def embedder(self) -> Any: ...


def get_judge(store: Configured) -> Judge:
    """The judge of ``store``: :func:`make_judge` of its settings and its embedder's kind."""
    return make_judge(store.settings, getattr(store.embedder, "kind", None))


def are_same_facts(judge: Judge, pairs: Sequence[Pair], kinds: Sequence[tuple[str, str] | None]) -> list[bool]:
    """``same_fact(judge, ...).merge`` of each pair (with its rows' ``kinds``), the pairs ``judge`` decides in
    one :meth:`Judge.merges` call (which skips the vetoes of the pairs that would not merge anyway)."""
    out = [False] * len(pairs)
    batch = [k for k, kind in enumerate(kinds) if not _kinds_apart(kind)]
    for k, merge in zip(batch, judge.merges([pairs[k] for k in batch]), strict=True):
        out[k] = merge
    for k in sorted(set(range(len(pairs))) - set(batch)):
        out[k] = same_fact(judge, *pairs[k], kinds=kinds[k]).merge
    return out


def contradictions_of(
    judge: Judge, pairs: Sequence[Pair], kinds: Sequence[tuple[str, str] | None]
) -> list[Contradiction | None]:
    """The contradictions the write path and the contradiction pass record: ``judge``'s own (for the pair
    model, the rules' and its verdicts) between two rows of one kind that are not episodes, the rules' alone
    elsewhere (two episodes, or two turns of a dialogue, are occurrences the model was not trained to oppose)."""
    out = rule_contradictions(pairs)
    own = [k for k, kind in enumerate(kinds) if not _kinds_apart(kind)]
    if own and not isinstance(judge, RulesJudge | CalibratedJudge):
        for k, hit in zip(own, judge.contradictions([pairs[k] for k in own]), strict=True):
            out[k] = hit
    return out


def _kinds_apart(kinds: tuple[str, str] | None) -> bool:
    """Rows the judge does not decide between: two kinds, or an episode (two similar episodes are two
    occurrences)."""
    return kinds is not None and (kinds[0] != kinds[1] or "episodic" in kinds)


def same_fact(judge: Judge, a: str, b: str, cosine: float, *, kinds: tuple[str, str] | None = None) -> Verdict:
    """``judge`` on one pair: write-time dedup collapses ``b`` into ``a`` when ``.merge`` holds.

    ``kinds`` are the two rows' kinds. As in the corpus merge, the judge decides only between rows of one kind
    that are not episodes (two similar episodes are two occurrences); other pairs collapse only at or above
    ``MEMORY_DUPLICATE_THRESHOLD`` without a veto, as before the judge.
    """
    if kinds is not None and _kinds_apart(kinds):
        limit = judge.duplicate_threshold
        if cosine >= limit and conflict(a, b) is None:
            return Verdict("duplicate", cosine, f"duplicate ({cosine:.3f} >= {limit})")
        return Verdict("distinct", cosine, f"{kinds[0]} / {kinds[1]}: below the duplicate threshold or vetoed")
    return judge.judge([(a, b, cosine)])[0]
