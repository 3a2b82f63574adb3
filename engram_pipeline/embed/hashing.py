"""Deterministic feature hashing: no model files, thousands of sentences per second.

Features are lower-cased word unigrams, word bigrams and character trigrams of each word (padded with
``<`` and ``>``). Each feature lands on ``crc32(feature) % dim`` with a sign from a second bit of the same
hash, so a vector is identical in every process (Python's ``hash()`` is salted per process and would not be).
The three families are normalised separately and weighted, so a long sentence's many trigrams do not drown
its words.

>>> e = HashingEmbedder(dim=64)
>>> v = e.embed(["User lives in Berlin", ""])
>>> v.shape, round(float(v[0] @ v[0]), 5), float(abs(v[1]).sum())
((2, 64), 1.0, 0.0)
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

from engram_pipeline.embed.base import CalibratedProfile, l2_normalise

_WORD = re.compile(r"\w+")
# weights of word unigrams, word bigrams, character trigrams after each family is normalised
_WEIGHTS = (1.0, 0.5, 1.0)
_CACHE_LIMIT = 500_000


class HashingEmbedder(CalibratedProfile):
    """Signed feature hashing into ``dim`` components. The name carries the dimension: ``hashing-384``.

    A change to the feature scheme changes every vector and must change ``name`` too, so that a store
    written with the old scheme refuses the new one.
    """

    kind = "hashing"

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError(f"ENGRAM_HASHING_DIM={dim}: must be at least 8")
        self._dim = dim
        self._words: dict[str, list[tuple[int, tuple[int, float]]]] = {}

    @property
    def name(self) -> str:
        return f"hashing-{self._dim}"

    @property
    def dimension(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        n, dim = len(texts), self._dim
        # per family: the row, column and sign of every feature occurrence
        rows: tuple[list[int], list[int], list[int]] = ([], [], [])
        cols: tuple[list[int], list[int], list[int]] = ([], [], [])
        signs: tuple[list[float], list[float], list[float]] = ([], [], [])
        for i, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            if not words and text.strip():
                words = [text.strip()]  # symbols only ("!!!"): still a non-zero vector from its characters
            for w in words:
                for family, (col, sign) in self._word_slots(w):
                    rows[family].append(i)
                    cols[family].append(col)
                    signs[family].append(sign)
            for a, b in zip(words, words[1:], strict=False):
                col, sign = self._slot(f"b:{a} {b}")
                rows[1].append(i)
                cols[1].append(col)
                signs[1].append(sign)
        out = np.zeros((n, dim), dtype=np.float32)
        for family, weight in enumerate(_WEIGHTS):
            if not rows[family]:
                continue
            flat = np.asarray(rows[family], dtype=np.int64) * dim + np.asarray(cols[family], dtype=np.int64)
            block = np.bincount(flat, weights=signs[family], minlength=n * dim).reshape(n, dim)
            out += weight * l2_normalise(block)
        return l2_normalise(out)

    def _word_slots(self, word: str) -> list[tuple[int, tuple[int, float]]]:
        """The unigram (family 0) and character-trigram (family 2) slots of one word, cached."""
        slots = self._words.get(word)
        if slots is None:
            padded = f"<{word}>"
            slots = [(0, self._slot(f"w:{word}"))]
            slots += [(2, self._slot(f"c:{padded[i : i + 3]}")) for i in range(len(padded) - 2)]
            if len(self._words) < _CACHE_LIMIT:
                self._words[word] = slots
        return slots

    def _slot(self, feature: str) -> tuple[int, float]:
        h = zlib.crc32(feature.encode("utf-8"))
        return h % self._dim, 1.0 if (h >> 31) & 1 else -1.0
