"""The pair model's judge: the cross-encoder of :mod:`engram_pipeline.pair_model` decides, screened by the
calibrated judge and overruled only by a conflict both texts state."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from engram_pipeline.claims import Contradiction
from engram_pipeline.judge.base import Pair, Verdict, rule_contradictions
from engram_pipeline.judge.calibrated import CalibratedJudge, same_claims
from engram_pipeline.merge_guard import conflict


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
