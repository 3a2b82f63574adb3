"""Per-text sets of many texts as sparse matrices, so that many pairs' set comparisons are one call each.

The write path compares every new row with several candidates, and what the merge judge and the contradiction
prefilter ask of a pair are set sizes and equalities: shared content tokens, shared trigrams, a shared claim
slot, the same normalised text. :class:`TextTable` numbers the distinct texts of a batch once; for each kind of
per-text value it builds, on first use, a binary CSR matrix (one row per text, one column per distinct set
element) or an array of equality ids, and answers for arrays of text rows ``a`` and ``b``:

- :meth:`TextTable.overlap`: ``len(of(x) & of(y))`` for each pair, an exact integer count;
- :meth:`TextTable.sizes`: ``len(of(x))`` for each text;
- :meth:`TextTable.same`: ``of(x) == of(y)`` for each pair (by equality ids, so exact as well).

The per-text functions (``of``) are the scalar rules' own cached functions: nothing here restates a rule.

>>> table = TextTable(["a b c", "b c d", "x"])
>>> split = lambda t: frozenset(t.split())
>>> a, b = table.rows(["a b c", "a b c"]), table.rows(["b c d", "x"])
>>> table.overlap("words", split, a, b).tolist(), table.sizes("words", split)[b].tolist()
([2, 0], [3, 1])
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

# Below this many pairs, set operations pair by pair on the cached per-text sets are cheaper than building the
# matrices (their fixed cost is about a millisecond): a single ``remember`` checks about 8 pairs.
SMALL_BATCH = 128
# Entries of each per-text cache (the scalar rules' ``functools.lru_cache``: tokens, parses, claims, ...). A shard
# sweep reads every text of its agents and several stages (promotion's duplicates, contradictions, the merge
# judge, consolidation) derive the same per-text values again, far apart in time. An LRU cache smaller than the
# sweep's texts keeps none of them between stages, so its cost per agent grew with the shard: at 65,536 entries,
# 2.3 parses per row at 2,500 agents x 100 memories against 0.8 at 250 (bench/profile_sweep.py). This holds the
# texts of one shard of 10,000 agents over 4 shards (250,000 rows) and their sentences, with room to spare.
TEXT_CACHE_SIZE = 1 << 19


def _csr(arg: tuple[np.ndarray, object, object], shape: tuple[int, int]) -> csr_matrix:
    """A ``scipy.sparse.csr_matrix``, imported on first use: scipy.sparse costs 0.25 CPU-s to import, which a
    command that never compares texts (a recall, a ``get``) should not pay."""
    from scipy.sparse import csr_matrix

    return csr_matrix(arg, shape=shape)


class TextTable:
    """The distinct texts of a batch, numbered in first-seen order, with their sets built on first use."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.index: dict[str, int] = {}
        for text in texts:
            self.index.setdefault(text, len(self.index))
        self._sets: dict[str, tuple[csr_matrix, np.ndarray]] = {}
        self._ids: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        """The row of each text (every text must be in the table)."""
        return np.fromiter((self.index[t] for t in texts), dtype=np.int64, count=len(texts))

    def _matrix(self, name: str, of: Callable[[str], Iterable[Hashable]]) -> tuple[csr_matrix, np.ndarray]:
        if name not in self._sets:
            vocab: dict[Hashable, int] = {}
            indices: list[int] = []
            indptr = [0]
            for text in self.index:
                indices.extend(vocab.setdefault(x, len(vocab)) for x in of(text))
                indptr.append(len(indices))
            data = np.ones(len(indices), dtype=np.int32)
            m = _csr((data, indices, indptr), shape=(len(self.index), max(1, len(vocab))))
            m.sort_indices()  # canonical (a set has no repeated element): the element-wise product's fast path
            self._sets[name] = (m, np.diff(np.asarray(indptr, dtype=np.int64)))
        return self._sets[name]

    def char_trigrams(self, name: str, of: Callable[[str], str]) -> None:
        """Build the sets ``name`` as the character trigrams of ``of(text)`` (``{s[i:i + 3]}``), from the
        characters' code points in numpy: the same sets as Python's slices, without a string per trigram."""
        if name in self._sets:
            return
        strings = [of(t) for t in self.index]
        lengths = np.asarray([len(x) for x in strings], dtype=np.int64)
        text = "".join(strings).encode("utf-32-le", errors="surrogatepass")
        points = np.frombuffer(text, dtype=np.uint32).astype(np.uint64)  # a code point has at most 21 bits
        row = np.repeat(np.arange(len(strings)), lengths)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        ok = (np.arange(len(points)) - starts) <= np.repeat(lengths, lengths) - 3  # a trigram inside its text
        ok[max(0, len(points) - 2) :] = False
        at = np.flatnonzero(ok)
        codes = (points[at] << np.uint64(42)) | (points[at + 1] << np.uint64(21)) | points[at + 2]
        column, width = _dense_ranks(codes)
        keys = np.sort(row[at] * width + column)
        keys = keys[np.r_[True, keys[1:] != keys[:-1]]] if len(keys) else keys  # each (text, trigram) once
        rows, cols = np.divmod(keys, width)
        indptr = np.searchsorted(rows, np.arange(len(strings) + 1))
        data = np.ones(len(keys), dtype=np.int32)
        m = _csr((data, cols, indptr), shape=(len(strings), width))
        self._sets[name] = (m, np.diff(indptr).astype(np.int64))

    def sizes(self, name: str, of: Callable[[str], Iterable[Hashable]]) -> np.ndarray:
        """``len(of(text))`` for every row of the table."""
        return self._matrix(name, of)[1]

    def overlap(self, name: str, of: Callable[[str], Iterable[Hashable]], a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``len(set(of(x)) & set(of(y)))`` for each pair of rows ``(a[k], b[k])``."""
        m, _ = self._matrix(name, of)
        if not len(a):
            return np.zeros(0, dtype=np.int64)
        return np.asarray(m[a].multiply(m[b]).sum(axis=1), dtype=np.int64).ravel()

    def ids(self, name: str, of: Callable[[str], Hashable]) -> tuple[np.ndarray, np.ndarray]:
        """An equality id of ``of(text)`` for every row (equal values, equal ids), and whether the value is truthy."""
        if name not in self._ids:
            seen: dict[Hashable, int] = {}
            values = [of(t) for t in self.index]
            ids = np.fromiter((seen.setdefault(v, len(seen)) for v in values), dtype=np.int64, count=len(values))
            self._ids[name] = (ids, np.fromiter((bool(v) for v in values), dtype=bool, count=len(values)))
        return self._ids[name]

    def same(
        self, name: str, of: Callable[[str], Hashable], a: np.ndarray, b: np.ndarray, *, non_empty: bool = False
    ) -> np.ndarray:
        """``of(x) == of(y)`` for each pair of rows (with ``non_empty``, also ``bool(of(x))``)."""
        ids, truthy = self.ids(name, of)
        equal = ids[a] == ids[b]
        return equal & truthy[a] if non_empty else equal


def _dense_ranks(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's rank among the distinct values (equal values, equal ranks), and how many there are (at
    least 1): a value's place among the sorted distinct values, found by binary search. ``np.sort`` of the
    values is many times faster than ``np.argsort(kind="stable")``, which the ranks came from before: 17 ms
    against 54 ms for the 934,017 trigrams of 12,000 texts of the bulk import's kind (bench_store.texts; numpy
    2.4), and this function held most of :meth:`TextTable.char_trigrams`'s time."""
    if not len(values):
        return np.zeros(0, dtype=np.int64), 1
    ordered = np.sort(values)
    distinct = ordered[np.r_[True, ordered[1:] != ordered[:-1]]]
    return np.searchsorted(distinct, values).astype(np.int64), len(distinct)
