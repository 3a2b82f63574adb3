"""The calibrated judge: a logistic regression over cheap features of a pair, with weights per embedder
(``judges/<embedder>.json``, trained by ``bench/train_judge.py``), and the same-claims test every judge uses."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import numpy as np

from engram_pipeline.claims import Contradiction, _stem, content_tokens, normalise_value, parse_claims
from engram_pipeline.judge.base import Pair, Verdict, rule_contradictions
from engram_pipeline.lexicon import relation_family
from engram_pipeline.merge_guard import conflict
from engram_pipeline.text_sets import SMALL_BATCH, TEXT_CACHE_SIZE, TextTable

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


def load_weights(kind: str) -> dict[str, Any] | None:
    """The calibrated judge weights shipped for embedder ``kind`` (``judges/<kind>.json``), or None."""
    path = resources.files("engram_pipeline").joinpath("judges", f"{kind}.json")
    try:
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return doc
