"""Clusters over a neighbour graph (:data:`~engram_pipeline.similarity.graph.PAIRS_SCHEMA`), shared by passes.

Three shapes, for three kinds of decision:

* :func:`components`: connected components of the pairs in a score band. Transitive: ``a~b`` and ``b~c`` put
  ``a`` and ``c`` together however far apart they are, which suits grouping (review), never merging. Cost:
  ``O(pairs)`` (one sparse graph, ``scipy.sparse.csgraph``).
* :func:`star_clusters`: greedy canonical-first stars. Every member is in the band *with its canonical*, so
  there are no chains: what a merge needs. Cost: ``O(pairs log pairs)`` in Python over the pairs in the band.
* :func:`average_linkage`: agglomerative clusters of a small dense similarity matrix, merged while the mean
  similarity between two clusters is at least a threshold (UPGMA). No chains either: a member joins a cluster
  only if it is, on average, that similar to all of it (episode clustering, inside a session window). Cost:
  ``O(m^2)`` for ``m`` rows (``scipy.cluster.hierarchy``), so callers bound ``m``.

All are deterministic: the same pairs (in any row order) give the same clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


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
    # imported here: scipy's modules cost 0.45 CPU-s, which a command that never clusters should not pay
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

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


def average_linkage(similarity: np.ndarray, threshold: float) -> list[list[int]]:
    """Clusters of the rows of a square, symmetric ``similarity`` matrix by average linkage (UPGMA), cut at
    ``threshold``: two clusters merge, most similar first, while the mean similarity over every pair of their
    members is at least ``threshold``. The objective is that every cluster's members are, on average, that
    similar to each other, whatever chains of pairs link them.

    Returns lists of row indices (each sorted; singletons included), largest first, then by first index.

    >>> s = np.array([[1, .9, .7, 0], [.9, 1, .8, 0], [.7, .8, 1, .7], [0, 0, .7, 1]])
    >>> average_linkage(s, 0.6)
    [[0, 1, 2], [3]]
    """
    m = len(similarity)
    if m < 2:
        return [[0]] if m else []
    distance = 1.0 - np.clip(np.asarray(similarity, dtype=np.float64), -1.0, 1.0)
    distance = (distance + distance.T) / 2
    np.fill_diagonal(distance, 0.0)
    condensed = distance[np.triu_indices(m, k=1)]
    from scipy.cluster.hierarchy import fcluster, linkage

    labels = fcluster(linkage(condensed, method="average"), t=1.0 - threshold + 1e-9, criterion="distance")
    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels.tolist()):
        groups.setdefault(label, []).append(i)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0]))
