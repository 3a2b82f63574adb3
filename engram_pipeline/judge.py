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
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from engram_pipeline.claims import (
    Contradiction,
    _stem,
    content_tokens,
    detect_contradictions,
    normalise_value,
    parse_claims,
)
from engram_pipeline.lexicon import relation_family
from engram_pipeline.merge_guard import conflict, merge_decision
from engram_pipeline.settings import Settings
from engram_pipeline.text_sets import SMALL_BATCH, TEXT_CACHE_SIZE, TextTable

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

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

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]: ...

    def merges(self, pairs: Sequence[Pair]) -> list[bool]: ...

    def contradictions(self, pairs: Sequence[Pair]) -> list[Contradiction | None]: ...


def rule_contradictions(pairs: Sequence[Pair]) -> list[Contradiction | None]:
    """The contradiction rules' hits (:func:`engram_pipeline.claims.detect_contradictions`): what a judge
    without a model flags."""
    return detect_contradictions([(a, b) for a, b, _ in pairs])


class RulesJudge:
    """The band rule: ``cosine >= merge_threshold``, no hard veto, containment (no upper gap: a pair at or
    above the duplicate threshold is judged like any other, with the vetoes)."""

    name = "rules"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @property
    def floor(self) -> float:
        return self._settings.merge_threshold

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


FEATURES = (
    "cosine",
    "containment",
    "jaccard",
    "stem_jaccard",
    "char_trigram_jaccard",
    "length_ratio",
    "added_share_max",
    "added_share_min",
    "log_tokens_min",
    "identical",
    "cosine_x_containment",
)


def features(a: str, b: str, cosine: float) -> list[float]:
    """The pair's features, in :data:`FEATURES` order (cheap: set operations on per-text tokens, cached)."""
    (ta, sa, na), (tb, sb, nb) = _text(a), _text(b)
    ca, cb = _trigrams(a), _trigrams(b)
    inter, union = len(ta & tb), len(ta | tb)
    small, large = sorted((len(ta), len(tb)))
    containment = inter / small if small else float(ta == tb)
    added = sorted((len(ta - tb) / max(1, len(ta)), len(tb - ta) / max(1, len(tb))))
    return [
        float(cosine),
        containment,
        inter / union if union else 1.0,
        len(sa & sb) / len(sa | sb) if sa | sb else 1.0,
        len(ca & cb) / len(ca | cb) if ca | cb else 1.0,
        small / large if large else 1.0,
        added[1],
        added[0],
        math.log1p(small),
        float(na == nb),
        float(cosine) * containment,
    ]


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _text(text: str) -> tuple[frozenset[str], frozenset[str], str]:
    """Content tokens, their stems and the normalised text (a text meets many pairs)."""
    tokens = content_tokens(text)
    return tokens, frozenset(_stem(t) for t in tokens), normalise_value(text)


def _padded(text: str) -> str:
    """The normalised text between two spaces, whose character trigrams are compared."""
    return f" {_text(text)[2]} "


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _trigrams(text: str) -> frozenset[str]:
    padded = _padded(text)
    return frozenset(padded[i : i + 3] for i in range(len(padded) - 2))


def feature_matrix(pairs: Sequence[Pair], table: TextTable | None = None) -> np.ndarray:
    """:func:`features` of many pairs at once, one row per pair and equal to it bit for bit (the same integer
    counts, the same float operations), with the set sizes from one sparse product per kind of set
    (:class:`engram_pipeline.text_sets.TextTable`; pass ``table`` to share its per-text work with other checks)."""
    if not pairs:
        return np.zeros((0, len(FEATURES)))
    table = table or TextTable(t for a, b, _ in pairs for t in (a, b))
    ia, ib = table.rows([a for a, _, _ in pairs]), table.rows([b for _, b, _ in pairs])
    cos = np.asarray([c for _, _, c in pairs], dtype=np.float64)
    (na, nb, inter), stems = (_counts(table, name, of, ia, ib) for name, of in (("tokens", _tokens), ("stems", _stems)))
    table.char_trigrams("trigrams", _padded)  # from the characters' codes, without a set per text
    trigrams = _counts(table, "trigrams", _trigrams, ia, ib)
    small, large = np.minimum(na, nb), np.maximum(na, nb)
    containment = np.where(small > 0, _ratio(inter, small), (large == 0).astype(np.float64))
    added = _ratio(na - inter, np.maximum(1, na)), _ratio(nb - inter, np.maximum(1, nb))
    log_small = np.asarray([math.log1p(k) for k in range(int(small.max()) + 1)])[small]  # math's, as features
    return np.column_stack(
        [
            cos,
            containment,
            *(_jaccard(*counts) for counts in ((na, nb, inter), stems, trigrams)),
            np.where(large > 0, _ratio(small, large), 1.0),
            np.maximum(*added),
            np.minimum(*added),
            log_small,
            table.same("normalised", _normalised, ia, ib).astype(np.float64),
            cos * containment,
        ]
    )


def _counts(
    table: TextTable, name: str, of: Callable[[str], frozenset[str]], ia: np.ndarray, ib: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Sizes of both sides' sets ``of(text)`` and of their intersection."""
    sizes = table.sizes(name, of)
    return sizes[ia], sizes[ib], table.overlap(name, of, ia, ib)


def _tokens(text: str) -> frozenset[str]:
    return _text(text)[0]


def _stems(text: str) -> frozenset[str]:
    return _text(text)[1]


def _normalised(text: str) -> str:
    return _text(text)[2]


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` where ``den`` is not 0 (elsewhere 0; callers choose what stands there)."""
    return np.divide(num, den, out=np.zeros(len(num)), where=den > 0)


def _jaccard(na: np.ndarray, nb: np.ndarray, inter: np.ndarray) -> np.ndarray:
    union = na + nb - inter
    return np.where(union > 0, _ratio(inter, union), 1.0)


def same_claims(a: str, b: str) -> bool:
    """Both texts assert the same non-empty set of claims (:func:`engram_pipeline.claims.parse_claims`).

    Subjects and values compare as stemmed content-token sets, relations by family (``lives in`` =
    ``resides in``, ``likes`` ~ ``prefers``), and a copula reads both ways ("X is Y" = "Y is X").

    >>> same_claims("User lives in Berlin.", "I reside in Berlin")
    True
    >>> same_claims("User lives in Berlin", "User lives in Bonn")
    False
    """
    ka, kb = _claim_keys(a), _claim_keys(b)
    return bool(ka) and ka == kb


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _claim_keys(text: str) -> frozenset[tuple[Any, ...]]:
    keys: set[tuple[Any, ...]] = set()
    for c in parse_claims(text):
        subject, value = (frozenset(_stem(t) for t in content_tokens(x) if t != "user's") for x in (c.subject, c.value))
        relation = relation_family(c.relation)
        if relation == "is":
            keys.add((relation, frozenset((subject, value)), c.negated))
        else:
            keys.add((relation, subject, value, c.negated))
    return frozenset(keys)


class CalibratedJudge:
    """Logistic regression over :func:`features`, with weights calibrated per embedder (see module doc).

    ``doc`` is a weights file as ``bench/train_judge.py`` writes it: ``features``, ``mean``, ``scale``,
    ``weights``, ``bias``, the decision ``threshold`` on the probability and the candidate ``floor``.
    """

    def __init__(self, doc: dict[str, Any], *, duplicate_threshold: float = 1.0) -> None:
        if list(doc["features"]) != list(FEATURES):
            raise ValueError(f"judge weights for {doc.get('embedder')!r} were trained on other features")
        self.doc = doc
        self._mean = np.asarray(doc["mean"], dtype=np.float64)
        self._scale = np.asarray(doc["scale"], dtype=np.float64)
        self._w = np.asarray(doc["weights"], dtype=np.float64)
        self._b = float(doc["bias"])
        self.threshold = float(doc["threshold"])
        self._floor = float(doc["floor"])
        self.duplicate_threshold = duplicate_threshold

    @property
    def name(self) -> str:
        return f"calibrated:{self.doc['embedder']}"

    @property
    def floor(self) -> float:
        return self._floor

    def probabilities(self, pairs: Sequence[Pair], table: TextTable | None = None) -> np.ndarray:
        """P(same fact) for each pair, ignoring the vetoes and the floor."""
        if not pairs:
            return np.zeros(0)
        if len(pairs) < SMALL_BATCH and table is None:
            x = np.asarray([features(a, b, c) for a, b, c in pairs], dtype=np.float64)  # the same numbers
        else:
            x = feature_matrix(pairs, table)
        t = (x - self._mean) / self._scale * self._w
        z = np.full(len(pairs), self._b)
        for k in range(t.shape[1]):  # a fixed order of sums: a pair scores the same alone or in any batch
            z = z + t[:, k]
        return np.asarray(1.0 / (1.0 + np.exp(-z)))

    def merges(self, pairs: Sequence[Pair]) -> list[bool]:
        """``[v.merge for v in self.judge(pairs)]``, without the hard vetoes of the pairs that would not merge
        anyway (a veto only turns a merge into a contradiction): the write path's question, cheaper. The
        features, the probabilities and the same-claims test run for all pairs at once, the vetoes on the few
        pairs left."""
        if not pairs:
            return []
        cos = np.asarray([c for _, _, c in pairs], dtype=np.float64)
        table = None
        if len(pairs) < SMALL_BATCH:
            same = np.asarray([same_claims(a, b) for a, b, _ in pairs], dtype=bool)
        else:
            table = TextTable(t for a, b, _ in pairs for t in (a, b))
            ia, ib = table.rows([a for a, _, _ in pairs]), table.rows([b for _, b, _ in pairs])
            same = table.same("claims", _claim_keys, ia, ib, non_empty=True)  # same_claims of every pair
        likely = (cos >= self.duplicate_threshold) | (self.probabilities(pairs, table) >= self.threshold) | same
        out = ((cos >= self._floor) & likely).tolist()
        for k in np.flatnonzero(out).tolist():
            out[k] = conflict(pairs[k][0], pairs[k][1]) is None
        return out

    def contradictions(self, pairs: Sequence[Pair]) -> list[Contradiction | None]:
        return rule_contradictions(pairs)

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        out = []
        p = self.probabilities(pairs)
        for (a, b, cos), prob in zip(pairs, p.tolist(), strict=True):
            if cos < self._floor:  # another topic: its vetoes say nothing
                out.append(Verdict("distinct", prob, f"below judge floor ({cos:.3f} < {self._floor})"))
            elif (veto := conflict(a, b)) is not None:
                out.append(Verdict("contradiction", prob, f"veto: {veto}"))
            elif cos >= self.duplicate_threshold:
                out.append(Verdict("duplicate", prob, f"duplicate ({cos:.3f} >= {self.duplicate_threshold})"))
            elif same_claims(a, b):
                out.append(Verdict("duplicate", prob, f"same claims (cosine {cos:.3f}, judge p={prob:.3f})"))
            elif prob >= self.threshold:
                out.append(Verdict("duplicate", prob, f"judge p={prob:.3f} >= {self.threshold} (cosine {cos:.3f})"))
            else:
                out.append(Verdict("distinct", prob, f"judge p={prob:.3f} < {self.threshold} (cosine {cos:.3f})"))
        return out


class PairJudge:
    """The pair model (:mod:`engram_pipeline.pair_model`) decides; the lexical vetoes stand only where both
    texts state a conflict (:func:`engram_pipeline.merge_guard.conflict` with ``stated_only``).

    Per candidate pair (cosine at least :attr:`floor`), in order: a stated conflict or the model's
    ``P(contradiction)`` at or above its threshold is a ``contradiction``; then a pair at or above
    ``MEMORY_DUPLICATE_THRESHOLD`` that the model reads as the same fact more than anything else, one whose
    ``P(duplicate)`` reaches its threshold or one asserting the same claims (:func:`same_claims`) is a
    ``duplicate``; the rest are ``distinct`` (a near-identical pair the model reads as opposite, "Hana mentors
    Luis" / "Luis mentors Hana", is kept apart even below the contradiction threshold). Thresholds and floor come from
    the model's card (``judges/pair-minilm.json``), chosen on the validation split.

    The model costs milliseconds a pair, so it reads only the candidates worth it: the ``screen`` (the
    calibrated judge of the same embedder, microseconds a pair) must give the pair at least the card's
    ``screen`` probability, set so that 98% of the validation split's same-fact pairs pass. Below it a pair
    shares too little wording to be the same fact or a stated opposite, and is ``distinct`` (a stated conflict
    still vetoes it, as the rules would). A pair with a stated conflict is a contradiction without a read.

    The model's probabilities are kept per pair of texts (both orders are one entry), so a pass that asks about
    one pair twice (decide, then recount after a kill) gets the same answer without running it again.
    """

    CACHE = 65536

    def __init__(
        self,
        card: dict[str, Any],
        *,
        duplicate_threshold: float = 1.0,
        floor: float | None = None,
        screen: CalibratedJudge | None = None,
    ) -> None:
        self.card = card
        self.t_duplicate = float(card["thresholds"]["duplicate"])
        self.t_contradiction = float(card["thresholds"]["contradiction"])
        self._floor = float(card["floor"] if floor is None else floor)
        self.screen = screen
        self.t_screen = float(card.get("screen", 0.0))
        self.duplicate_threshold = duplicate_threshold
        self._seen: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"pair:{self.card['model']}"

    @property
    def floor(self) -> float:
        return self._floor

    def probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """``(n, 3)``: P(duplicate), P(contradiction), P(distinct) of each pair, whatever its cosine."""
        from engram_pipeline import pair_model

        keys = [(a, b) if a <= b else (b, a) for a, b in pairs]
        with self._lock:
            known = {k: self._seen[k] for k in set(keys) if k in self._seen}
        todo = sorted(set(keys) - known.keys())
        if todo:
            fresh = dict(zip(todo, pair_model.load().probabilities(todo), strict=True))
            known.update(fresh)
            with self._lock:
                self._seen.update(fresh)
                while len(self._seen) > self.CACHE:
                    self._seen.popitem(last=False)
        return np.asarray([known[k] for k in keys], dtype=np.float64).reshape(len(pairs), 3)

    def worth_reading(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Which pairs the model reads: at or above the floor, and passing the screen (see the class doc)."""
        near = np.asarray([cos >= self._floor for _, _, cos in pairs], dtype=bool)
        if self.screen is None or not near.any():
            return near
        idx = np.flatnonzero(near).tolist()
        near[idx] = self.screen.probabilities([pairs[i] for i in idx]) >= self.t_screen
        return near

    def _scored(self, pairs: Sequence[Pair], read: np.ndarray) -> np.ndarray:
        """:meth:`probabilities` of the pairs ``read`` marks; ``P(distinct) = 1`` for the rest (never run)."""
        p = np.zeros((len(pairs), 3))
        p[:, 2] = 1.0
        idx = np.flatnonzero(read).tolist()
        if idx:
            p[idx] = self.probabilities([(pairs[i][0], pairs[i][1]) for i in idx])
        return p

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        out = []
        # A conflict both texts state decides the pair whatever the model says: such pairs are never read
        # (many near pairs of a templated store differ only in a stated number or name).
        vetoes = [conflict(a, b, stated_only=True) if cos >= self._floor else None for a, b, cos in pairs]
        read = self.worth_reading(pairs) & np.asarray([v is None for v in vetoes], dtype=bool)
        p = self._scored(pairs, read)
        rows = zip(pairs, vetoes, p.tolist(), read.tolist(), strict=True)
        for (a, b, cos), veto, (p_dup, p_con, p_dist), model_read in rows:
            model = f"pair model p(same)={p_dup:.3f} p(contradiction)={p_con:.3f}, cosine {cos:.3f}"
            if cos < self._floor:  # another topic
                out.append(Verdict("distinct", 0.0, f"below judge floor ({cos:.3f} < {self._floor})"))
            elif veto is not None:
                out.append(Verdict("contradiction", cos, f"veto: {veto}"))
            elif not model_read:
                out.append(Verdict("distinct", 0.0, f"screened out: little shared wording (cosine {cos:.3f})"))
            elif p_con >= self.t_contradiction:
                out.append(Verdict("contradiction", p_con, f"{model}: contradiction"))
            elif cos >= self.duplicate_threshold and p_dup >= max(p_con, p_dist):
                out.append(Verdict("duplicate", p_dup, f"duplicate ({cos:.3f} >= {self.duplicate_threshold}); {model}"))
            elif p_dup >= self.t_duplicate:
                out.append(Verdict("duplicate", p_dup, f"{model}: same fact"))
            elif same_claims(a, b):
                out.append(Verdict("duplicate", p_dup, f"same claims; {model}"))
            else:
                out.append(Verdict("distinct", p_dup, model))
        return out

    def merges(self, pairs: Sequence[Pair]) -> list[bool]:
        return [v.merge for v in self.judge(pairs)]

    def contradictions(self, pairs: Sequence[Pair]) -> list[Contradiction | None]:
        """The rules' hits, and the model's contradictions among the rest (rule ``pair_model``)."""
        found = rule_contradictions(pairs)
        read = self.worth_reading(pairs)
        rest = [i for i, hit in enumerate(found) if hit is None and read[i]]
        if rest:
            p = self.probabilities([(pairs[i][0], pairs[i][1]) for i in rest])[:, 1]
            for i, p_con in zip(rest, p.tolist(), strict=True):
                if p_con >= self.t_contradiction:
                    found[i] = Contradiction("pair_model", f"pair model p(contradiction)={p_con:.3f}", "")
        return found


@functools.cache
def _pair_card() -> dict[str, Any] | None:
    from engram_pipeline import pair_model

    return pair_model.card() if pair_model.available() else None


def load_weights(kind: str) -> dict[str, Any] | None:
    """The calibrated judge weights shipped for embedder ``kind`` (``judges/<kind>.json``), or None."""
    path = resources.files("engram_pipeline").joinpath("judges", f"{kind}.json")
    try:
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return doc


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


def get_judge(store: MemoryStore) -> Judge:
    """The judge of ``store`` (its settings and embedder)."""
    return make_judge(store.settings, getattr(store.embedder, "kind", None))


def is_same_fact(store: MemoryStore, a: str, b: str, cosine: float, *, kinds: tuple[str, str] | None = None) -> bool:
    """``same_fact(...).merge``, skipping the vetoes of a pair the calibrated judge would not merge anyway."""
    return are_same_facts(store, [(a, b, cosine)], [kinds])[0]


def are_same_facts(store: MemoryStore, pairs: Sequence[Pair], kinds: Sequence[tuple[str, str] | None]) -> list[bool]:
    """:func:`is_same_fact` of each pair (with its rows' ``kinds``): the pairs the calibrated judge decides are
    judged in one :meth:`CalibratedJudge.merges` call."""
    judge = get_judge(store)
    out = [False] * len(pairs)
    batch = [k for k, kind in enumerate(kinds) if not _kinds_apart(kind)]
    for k, merge in zip(batch, judge.merges([pairs[k] for k in batch]), strict=True):
        out[k] = merge
    for k in sorted(set(range(len(pairs))) - set(batch)):
        out[k] = same_fact(store, *pairs[k], kinds=kinds[k]).merge
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


def same_fact(store: MemoryStore, a: str, b: str, cosine: float, *, kinds: tuple[str, str] | None = None) -> Verdict:
    """The store's judge on one pair: write-time dedup collapses ``b`` into ``a`` when ``.merge`` holds.

    ``kinds`` are the two rows' kinds. As in the corpus merge, the judge decides only between rows of one kind
    that are not episodes (two similar episodes are two occurrences); other pairs collapse only at or above
    ``MEMORY_DUPLICATE_THRESHOLD`` without a veto, as before the judge.
    """
    if kinds is not None and _kinds_apart(kinds):
        s = store.settings
        if cosine >= s.duplicate_threshold and conflict(a, b) is None:
            return Verdict("duplicate", cosine, f"duplicate ({cosine:.3f} >= {s.duplicate_threshold})")
        return Verdict("distinct", cosine, f"{kinds[0]} / {kinds[1]}: below the duplicate threshold or vetoed")
    return get_judge(store).judge([(a, b, cosine)])[0]
