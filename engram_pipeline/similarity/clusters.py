"""Clusters over a neighbour graph (:data:`~engram_pipeline.similarity.graph.PAIRS_SCHEMA`), shared by passes.

Two shapes, for two kinds of decision:

* :func:`components`: connected components of the pairs in a score band. Transitive: ``a~b`` and ``b~c`` put
  ``a`` and ``c`` together however far apart they are, which suits grouping (episode clustering, review),
  never merging. Cost: ``O(pairs)`` (one sparse graph, ``scipy.sparse.csgraph``).
* :func:`star_clusters`: greedy canonical-first stars. Every member is in the band *with its canonical*, so
  there are no chains: what a merge needs. Cost: ``O(pairs log pairs)`` in Python over the pairs in the band.

Both are deterministic: the same pairs (in any row order) give the same clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


def _in_band(pairs: pa.Table, lo: float, hi: float | None) -> pa.Table:
    score = pairs["score"]
    mask = pc.greater_equal(score, lo)
    if hi is not None:
        mask = pc.and_(mask, pc.less(score, hi))
    return pairs.filter(mask)


def components(pairs: pa.Table, min_score: float, max_score: float | None = None) -> list[list[str]]:
    """Connected components of the graph of pairs with ``min_score <= score < max_score``.

    Ids that are in no such pair (singletons) are left out. Each component is sorted by id; components come
    largest first, then by their first id.

    >>> t = pa.table({"src_id": ["a", "b", "x"], "dst_id": ["b", "c", "y"], "score": [0.9, 0.95, 0.5]})
    >>> components(t, 0.8)
    [['a', 'b', 'c']]
    """
    band = _in_band(pairs, min_score, max_score)
    if band.num_rows == 0:
        return []
    ends = pa.chunked_array(band["src_id"].chunks + band["dst_id"].chunks).combine_chunks()
    names = pc.unique(ends)
    codes = pc.index_in(ends, value_set=names).to_numpy(zero_copy_only=False).astype(np.int64)
    m = band.num_rows
    n = len(names)
    graph = coo_matrix((np.ones(m, dtype=np.int8), (codes[:m], codes[m:])), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    groups: dict[int, list[str]] = {}
    for name, label in zip(names.to_pylist(), labels.tolist(), strict=True):
        groups.setdefault(label, []).append(name)
    result = [sorted(g) for g in groups.values()]
    result.sort(key=lambda g: (-len(g), g[0]))
    return result


def star_clusters(
    pairs: pa.Table,
    order: Sequence[str],
    lo: float,
    hi: float,
    eligible: Callable[[str, str], bool] | None = None,
) -> list[tuple[str, list[tuple[str, float]]]]:
    """Greedy canonical-first clusters: each member's score *with its canonical* is in ``[lo, hi)``.

    Candidates are taken in ``order`` (best canonical first; ids absent from ``order`` can be members but
    never canonicals). A candidate that is not yet assigned takes every unassigned id whose score with it is
    in the band and for which ``eligible(canonical, member)`` holds (the contradiction veto, say). A candidate
    that takes nobody stays unassigned and may join a later canonical. No chains: if ``a~b`` and ``b~c`` but
    not ``a~c``, the star of ``a`` holds ``b`` and ``c`` is left for another star.

    Returns ``(canonical, [(member, score), ...])`` in the order the canonicals were taken, members by score
    descending then id. Canonicals without members are not returned.

    >>> t = pa.table({"src_id": ["a", "b"], "dst_id": ["b", "c"], "score": [0.9, 0.9]})
    >>> star_clusters(t, ["a", "b", "c"], 0.85, 0.97)
    [('a', [('b', 0.9...)])]
    """
    band = _in_band(pairs, lo, hi)
    neighbours: dict[str, dict[str, float]] = {}
    for src, dst, score in zip(
        band["src_id"].to_pylist(), band["dst_id"].to_pylist(), band["score"].to_pylist(), strict=True
    ):
        if src == dst:
            continue
        for a, b in ((src, dst), (dst, src)):
            row = neighbours.setdefault(a, {})
            row[b] = max(score, row.get(b, score))

    assigned: set[str] = set()
    clusters: list[tuple[str, list[tuple[str, float]]]] = []
    for canonical in order:
        if canonical in assigned or canonical not in neighbours:
            continue
        members = sorted(
            (
                (member, score)
                for member, score in neighbours[canonical].items()
                if member not in assigned and (eligible is None or eligible(canonical, member))
            ),
            key=lambda ms: (-ms[1], ms[0]),
        )
        if not members:
            continue
        assigned.add(canonical)
        assigned.update(member for member, _ in members)
        clusters.append((canonical, members))
    return clusters
