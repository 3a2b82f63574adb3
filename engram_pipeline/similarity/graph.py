"""The neighbour graph: every unordered pair of memories whose cosine similarity reaches a floor.

Every pass that compares memories with each other (corpus merge, contradiction candidates, competition-aware
confidence decay, episode clustering) starts from this one table, so it is computed once per agent and run.

Method
------
Vectors are L2-normalised (defensively: a row whose norm is zero or not finite is skipped), so a cosine is a
dot product and a block of cosines is one matrix product.

*Exact* (``n <= exact_max_rows``): the upper triangle of the n x n similarity matrix is computed in square
tiles of ``block_size`` rows; only the hits of each tile are kept, so memory is one tile
(``block_size**2`` float32) plus the pairs. Cost: ``n**2 * d`` multiply-adds (half of the full matrix).

*Blocked* (larger ``n``), an inverted-file (IVF) scheme: spherical k-means on a sample (a few Lloyd
iterations in numpy) gives ``P`` centroids; every row's home is its nearest centroid, and every row is
compared with the members of its ``1 + probes`` nearest partitions, ranked by the row's own similarity to
the centroids (per-row probes, as an IVF index probes for a query). Partition by partition, the rows that
probe it are multiplied with its members in tiles. A pair straddling two partitions is found when either
side probes the other's home; a pair found from both sides (always so inside one partition) is kept once.
Per-row probes matter: probing the partitions nearest to a row's *centroid* (each partition against its 3
nearest) found 0.84 of the pairs >= 0.85 on broad synthetic topics where per-row probes found 0.975, for
less time (``bench/bench_neighbour_graph.py --topics 20``). ``probes`` trades time for recall.

Cost of the blocked path, with partitions of about ``n / P`` rows: k-means on ``48 * P`` sample rows and
assignment ``n * P * d``; products ``(1 + probes) * n**2 / P * d`` for balanced partitions. The sum is
smallest near ``P = sqrt((1 + probes) * n)``; the default ``P = ceil(sqrt(n))`` costs a quarter more than
that optimum but keeps partitions twice as large, so fewer pairs straddle partitions (better recall) and the
products are larger (better BLAS efficiency). At 200k rows that is 448 partitions of about 450 rows (n/1000
would give 200 partitions of 1000 rows: twice the product cost). The cost grows like ``n**1.5 * d``, i.e.
``n`` times a block of ``sqrt(n)`` rows, not ``n**2``. Partitions are as unbalanced as the data (on the
synthetic benchmark the products cost 2-2.5x the balanced figure); a tight blob that holds a large share of
the rows lands in one partition and costs the square of its size (memory stays bounded by the tiles).

Memory: the input matrix is used in place when it is already C-contiguous, L2-normalised float32 without
skipped rows (otherwise one normalised copy of the valid rows is made); beyond it, one tile of scores, the
sample used to train the centroids, and the pairs found. At 200k x 384 the input is 300 MB and the rest is
tens of MB, plus 16 bytes per pair found: choose ``floor`` so that the pair count stays reasonable.

Example
-------
>>> import numpy as np
>>> v = np.array([[1, 0], [0.99, 0.141], [0, 1]], dtype=np.float32)
>>> edges = neighbour_graph(["a", "b", "c"], v, floor=0.9).to_pylist()
>>> [(e["src_id"], e["dst_id"], round(e["score"], 2)) for e in edges]
[('a', 'b', 0.99)]
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PAIRS_SCHEMA = pa.schema(
    [
        pa.field("src_id", pa.string(), nullable=False),
        pa.field("dst_id", pa.string(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),
    ]
)
"""Columns of a neighbour graph: one row per unordered pair, ``src_id`` before ``dst_id`` in input order."""

DEFAULT_BLOCK_SIZE = 4096
_NORM_TOLERANCE = 1e-3
_KMEANS_ITERATIONS = 8
_KMEANS_SAMPLE_PER_CENTROID = 48
_KMEANS_MIN_SAMPLE = 16_384
_SCORE_SLACK = 1e-5  # how far under the floor a float32 tile may put a pair that reaches it (see _rescored)

_Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]


def neighbour_graph(
    ids: Sequence[str] | pa.Array | pa.ChunkedArray,
    vectors: np.ndarray,
    *,
    floor: float,
    exact_max_rows: int = 20_000,
    block_size: int | None = None,
    probes: int = 3,
    partitions: int | None = None,
    seed: int = 0,
) -> pa.Table:
    """Every unordered pair of rows whose cosine similarity is at least ``floor``.

    Args:
        ids: one id per row of ``vectors`` (kept as given; duplicates are not merged).
        vectors: ``(n, d)`` array, ideally L2-normalised float32 (used without a copy then). Other rows are
            normalised; rows whose norm is zero or not finite (any NaN or inf) are skipped.
        floor: smallest cosine kept.
        exact_max_rows: up to this many valid rows the answer is exact; above it the blocked path is used.
        block_size: rows per side of one matrix product; the largest score tile is ``block_size**2`` float32
            (default 4096, i.e. 64 MB).
        probes: blocked path only: nearest partitions each partition is compared with.
        partitions: blocked path only: number of k-means partitions (default ``ceil(sqrt(n))``).
        seed: seeds the k-means sample and initialisation; the result is deterministic for a given seed.

    Returns:
        A table with :data:`PAIRS_SCHEMA`: ``src_id``, ``dst_id``, ``score`` (float32 cosine), one row per
        unordered pair, where ``src_id`` is the row that comes first *in input order* (by position, not by
        id), sorted by (src position, dst position). A row is never paired with itself.
    """
    ids_arr = _as_string_array(ids)
    if vectors.ndim != 2 or vectors.shape[0] != len(ids_arr):
        raise ValueError(
            f"vectors must be a 2-d array with one row per id: got shape {vectors.shape} for {len(ids_arr)} ids"
        )
    if not -1.0 <= floor <= 1.0:
        raise ValueError(f"floor must be a cosine in [-1, 1], got {floor}")
    if probes < 0:
        raise ValueError(f"probes must be >= 0, got {probes}")
    block = block_size or DEFAULT_BLOCK_SIZE
    if block < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")

    unit, positions = _unit_rows(vectors)
    n = unit.shape[0]
    if n < 2:
        return PAIRS_SCHEMA.empty_table()
    if n <= exact_max_rows:
        found = _exact_pairs(unit, floor, block)
    else:
        k = partitions or math.ceil(math.sqrt(n))
        found = _blocked_pairs(unit, floor, block, probes, max(1, min(k, n)), np.random.default_rng(seed))
    return _to_table(ids_arr, positions, found)


def _as_string_array(ids: Sequence[str] | pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if isinstance(ids, pa.Array):
        return ids if ids.type == pa.string() else ids.cast(pa.string())
    return pa.array(list(ids), type=pa.string())


def _unit_rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """L2-normalised float32 rows, and their input positions (``None`` when every row is kept as is)."""
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    # Row norms in float64, a slice at a time: never an (n, d) temporary.
    norms = np.empty(x.shape[0], dtype=np.float64)
    step = 65_536
    for start in range(0, x.shape[0], step):
        chunk = x[start : start + step]
        norms[start : start + step] = np.sqrt(np.einsum("ij,ij->i", chunk, chunk, dtype=np.float64))
    valid = np.isfinite(norms) & (norms > 0)
    if valid.all() and np.all(np.abs(norms - 1.0) <= _NORM_TOLERANCE):
        return x, None
    positions = np.flatnonzero(valid)
    unit = x[positions]
    unit /= norms[positions, None].astype(np.float32)
    return unit, positions


def _exact_pairs(x: np.ndarray, floor: float, block: int) -> _Pairs:
    """Upper triangle of ``x @ x.T`` in square tiles; only pairs ``i < j`` with a score >= floor."""
    n = x.shape[0]
    out: list[_Pairs] = []
    for i0 in range(0, n, block):
        a = x[i0 : i0 + block]
        for j0 in range(i0, n, block):
            b = x[j0 : j0 + block]
            r, c = _hits(a @ b.T, floor)
            keep = r + i0 < c + j0
            r, c, s = _rescored(a, b, r[keep], c[keep], floor)
            out.append((r + i0, c + j0, s))
    return _concat(out)


def _blocked_pairs(x: np.ndarray, floor: float, block: int, probes: int, k: int, rng: np.random.Generator) -> _Pairs:
    """Each row against the members of its ``1 + probes`` nearest partitions (IVF with per-row probes)."""
    n = x.shape[0]
    centroids = _spherical_kmeans(x, k, rng, block)
    k = centroids.shape[0]
    top = _nearest(x, centroids, min(k, 1 + probes), block)
    members = _group(top[:, 0], k)
    # Rows that probe partition q, whatever their home partition: q's queries.
    queries = _group(top.reshape(-1), k)
    m = top.shape[1]

    out: list[_Pairs] = []
    for q in range(k):
        if members[q].size:
            out.extend(_tile_hits(x, queries[q] // m, members[q], floor, block))
    i, j, s = _concat(out)
    # A pair is found twice when each side probes the other's partition (always inside one partition).
    key = i * n + j
    _, first = np.unique(key, return_index=True)
    return i[first], j[first], s[first]


def _group(labels: np.ndarray, k: int) -> list[np.ndarray]:
    """Positions in ``labels`` holding each label ``0..k-1``, each ascending."""
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(k + 1))
    return [order[bounds[p] : bounds[p + 1]] for p in range(k)]


def _tile_hits(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, floor: float, block: int) -> Iterator[_Pairs]:
    """Pairs ``(min, max)`` of rows ``i != j`` with ``x[i] . x[j] >= floor``, ``i`` in ``rows``, ``j`` in ``cols``."""
    for c0 in range(0, cols.size, block):
        c_idx = cols[c0 : c0 + block]
        b = x[c_idx]
        for r0 in range(0, rows.size, block):
            r_idx = rows[r0 : r0 + block]
            a = x[r_idx]
            r, c = _hits(a @ b.T, floor)
            keep = r_idx[r] != c_idx[c]
            r, c, s = _rescored(a, b, r[keep], c[keep], floor)
            gi, gj = r_idx[r], c_idx[c]
            yield np.minimum(gi, gj), np.maximum(gi, gj), s


def _hits(s: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero(s >= floor - _SCORE_SLACK)`` for a sparse result: scanning only rows with a hit is ~10x
    faster. The slack keeps every pair a float32 product may put a hair under the floor; :func:`_rescored`
    decides."""
    mask = s >= floor - _SCORE_SLACK
    rows = np.flatnonzero(mask.any(axis=1))
    r, c = np.nonzero(mask[rows])
    return rows[r], c


def _rescored(a: np.ndarray, b: np.ndarray, r: np.ndarray, c: np.ndarray, floor: float) -> _Pairs:
    """The hits ``(r, c)`` of the tile ``a @ b.T`` whose cosine, recomputed in float64, reaches ``floor``, with it.

    A tile's float32 product rounds differently with the tile's shape and the machine's BLAS kernel, so the
    same pair scored from tiles of other sizes (an agent with a few more rows, a resumed run) differed in the
    last bits and, rounded, in the stored score (0.90576 against 0.905761). The rows of the tile that hold a
    hit are multiplied again in float64 with the columns that hold one: its rounding differences are 1e-16,
    far below what the float32 score keeps, so every pair gets the same score however it was found. The
    product, not one dot product per pair: gathering two vectors per pair cost 3.3 s for the 5,000-row agent
    of ``bench_many_agents`` (this: at most the float32 tile again)."""
    if not r.size:
        return r, c, np.empty(0, dtype=np.float32)
    rows, at_row = np.unique(r, return_inverse=True)
    cols, at_col = np.unique(c, return_inverse=True)
    s = (a[rows].astype(np.float64) @ b[cols].T.astype(np.float64))[at_row, at_col]
    keep = s >= floor
    return r[keep], c[keep], s[keep].astype(np.float32)


def _nearest(x: np.ndarray, centroids: np.ndarray, m: int, block: int) -> np.ndarray:
    """``(n, m)`` indices of the ``m`` nearest centroids of every row, nearest first."""
    top = np.empty((x.shape[0], m), dtype=np.int64)
    for start in range(0, x.shape[0], block):
        s = x[start : start + block] @ centroids.T
        t = np.argpartition(-s, m - 1, axis=1)[:, :m] if m < s.shape[1] else np.argsort(-s, axis=1)
        ranked = np.argsort(-np.take_along_axis(s, t, axis=1), axis=1, kind="stable")
        top[start : start + block] = np.take_along_axis(t, ranked, axis=1)
    return top


def _spherical_kmeans(x: np.ndarray, k: int, rng: np.random.Generator, block: int) -> np.ndarray:
    """Lloyd iterations on a sample with centroids kept on the unit sphere (cosine k-means)."""
    n = x.shape[0]
    m = min(n, max(k * _KMEANS_SAMPLE_PER_CENTROID, _KMEANS_MIN_SAMPLE))
    sample = x[np.sort(rng.choice(n, size=m, replace=False))]
    centroids = sample[rng.choice(m, size=k, replace=False)].copy()
    import scipy.sparse as sp  # here: scipy.sparse costs a command that builds no graph 0.25 CPU-s

    for _ in range(_KMEANS_ITERATIONS):
        labels = np.empty(m, dtype=np.int64)
        best = np.empty(m, dtype=np.float32)
        for start in range(0, m, block):
            sims = sample[start : start + block] @ centroids.T
            labels[start : start + block] = sims.argmax(axis=1)
            best[start : start + block] = sims.max(axis=1)
        onehot = sp.csr_matrix((np.ones(m, dtype=np.float32), (labels, np.arange(m))), shape=(k, m))
        sums = np.asarray(onehot @ sample, dtype=np.float32)
        norms = np.linalg.norm(sums, axis=1)
        empty = norms == 0
        if empty.any():
            # Reseed empty centroids with the sample rows that their centroids fit worst.
            worst = np.argsort(best, kind="stable")[: int(empty.sum())]
            sums[empty] = sample[worst]
            norms[empty] = 1.0
        centroids = sums / norms[:, None]
    return np.ascontiguousarray(centroids, dtype=np.float32)


def _concat(parts: list[_Pairs]) -> _Pairs:
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty(0, dtype=np.float32)
    return (
        np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False),
        np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False),
        np.concatenate([p[2] for p in parts]).astype(np.float32, copy=False),
    )


def _to_table(ids: pa.Array, positions: np.ndarray | None, found: _Pairs) -> pa.Table:
    i, j, s = found
    if positions is not None:
        i, j = positions[i], positions[j]
    order = np.lexsort((j, i))
    i, j = i[order], j[order]
    # Float32 rounding can put a self-similar pair a hair above 1.
    s = np.minimum(s[order], np.float32(1.0))
    return pa.table(
        {
            "src_id": pc.take(ids, pa.array(i)),
            "dst_id": pc.take(ids, pa.array(j)),
            "score": pa.array(s, type=pa.float32()),
        },
        schema=PAIRS_SCHEMA,
    )
