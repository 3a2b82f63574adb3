"""Deterministic feature hashing: no model files, about 50,000 sentences per second in batches on one core.

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
import threading
import zlib
from collections.abc import Sequence

import numpy as np

from engram_pipeline.embed.base import CalibratedProfile, l2_normalise

_WORD = re.compile(r"\w+")
# weights of word unigrams, word bigrams, character trigrams after each family is normalised
_WEIGHTS = (1.0, 0.5, 1.0)
_CACHE_LIMIT = 500_000  # words whose slots are kept; past it the vocabulary starts again


class HashingEmbedder(CalibratedProfile):
    """Signed feature hashing into ``dim`` components. The name carries the dimension: ``hashing-384``.

    A change to the feature scheme changes every vector and must change ``name`` too, so that a store
    written with the old scheme refuses the new one.

    A batch costs one pass in Python over its words (a dictionary look-up each, and one hash per word bigram);
    each word's unigram and trigram slots are hashed once, when the word is first seen, into arrays that
    numpy gathers from. Every feature weighs +-1, so a family's sums are exact integers whatever the order
    they are added in: the vectors are those of adding feature by feature (``tests/lib/embed/test_embed.py``).
    """

    kind = "hashing"

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError(f"ENGRAM_HASHING_DIM={dim}: must be at least 8")
        self._dim = dim
        self._vocab = _Vocabulary()
        self._lock = threading.Lock()  # the vocabulary grows in place

    @property
    def name(self) -> str:
        return f"hashing-{self._dim}"

    @property
    def dimension(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        n, dim = len(texts), self._dim
        word_ids: list[int] = []
        words_per_text: list[int] = []
        bigram_hashes: list[int] = []
        bigrams_per_text: list[int] = []
        with self._lock:
            vocab = self._vocab
            if len(vocab) >= _CACHE_LIMIT:
                vocab = self._vocab = _Vocabulary()
            known, add = vocab.ids.get, vocab.add
            for text in texts:
                words = _WORD.findall(text.lower())
                if not words and text.strip():
                    words = [text.strip()]  # symbols only ("!!!"): still a non-zero vector from its characters
                word_ids += [known(w) or add(w) for w in words]
                words_per_text.append(len(words))
                bigram_hashes += [_crc(f"b:{a} {b}") for a, b in zip(words, words[1:], strict=False)]
                bigrams_per_text.append(max(len(words) - 1, 0))
            ids = np.asarray(word_ids, dtype=np.int64)
            unigram_hashes = vocab.unigram_hash[ids]
            counts = vocab.trigram_count[ids]
            trigram_hashes = vocab.trigram_hashes(vocab.trigram_start[ids], counts)
        word_rows = np.repeat(np.arange(n, dtype=np.int64), words_per_text)
        families = (  # per family: the row of every feature occurrence and its hash
            (word_rows, unigram_hashes),
            (np.repeat(np.arange(n, dtype=np.int64), bigrams_per_text), np.asarray(bigram_hashes, dtype=np.int64)),
            (np.repeat(word_rows, counts), trigram_hashes),
        )
        out = np.zeros((n, dim), dtype=np.float32)
        for (rows, hashes), weight in zip(families, _WEIGHTS, strict=True):
            if not len(rows):
                continue
            cols, signs = _slots(hashes, dim)
            block = np.bincount(rows * dim + cols, weights=signs, minlength=n * dim).reshape(n, dim)
            out += weight * l2_normalise(block)
        return l2_normalise(out)


def _slots(hashes: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The column (``crc32 % dim``) and sign (bit 31: +1, else -1) of each feature's hash."""
    return hashes % dim, np.where((hashes >> 31) & 1, 1.0, -1.0)


def _crc(feature: str) -> int:
    return zlib.crc32(feature.encode("utf-8"))


class _Vocabulary:
    """The words seen so far, by id (from 1, so that ``known(w) or add(w)`` reads as one expression), with the
    hash of each word's unigram and the range of its character trigrams' hashes in one flat array. The arrays
    grow by doubling."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.unigram_hash = np.zeros(1024, dtype=np.int64)
        self.trigram_start = np.zeros(1024, dtype=np.int64)
        self.trigram_count = np.zeros(1024, dtype=np.int64)
        self.trigram_hash = np.zeros(8192, dtype=np.int64)
        self.trigrams_used = 0

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, word: str) -> int:
        k = len(self.ids) + 1
        if k == len(self.unigram_hash):
            self.unigram_hash, self.trigram_start, self.trigram_count = (
                _grown(a, 2 * k) for a in (self.unigram_hash, self.trigram_start, self.trigram_count)
            )
        padded = f"<{word}>"
        hashes = [_crc(f"c:{padded[i : i + 3]}") for i in range(len(padded) - 2)]
        start, end = self.trigrams_used, self.trigrams_used + len(hashes)
        if end > len(self.trigram_hash):
            self.trigram_hash = _grown(self.trigram_hash, 2 * end)
        self.trigram_hash[start:end] = hashes
        self.trigram_start[k], self.trigram_count[k], self.trigrams_used = start, len(hashes), end
        self.unigram_hash[k] = _crc(f"w:{word}")
        self.ids[word] = k
        return k

    def trigram_hashes(self, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The trigram hashes of the words whose ranges start at ``starts`` and hold ``counts``, in order."""
        ends = np.cumsum(counts)
        return self.trigram_hash[
            np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(starts - (ends - counts), counts)
        ]


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=array.dtype)
    out[: len(array)] = array
    return out
