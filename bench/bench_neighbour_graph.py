"""Benchmark the neighbour graph against an exact baseline and one LanceDB query per row.

    python bench/bench_neighbour_graph.py --n 200000 --dim 384      # full run (several minutes)
    python bench/bench_neighbour_graph.py --n 30000                 # quick run

Data: synthetic clustered vectors. Topic centres share a common direction and a few super-topics (so
cosines are positive and topics have neighbours, like real sentence embeddings); topic sizes are Zipf-like;
each row sits at a per-topic cosine of 0.6-0.9 from its centre. A share of rows (``--dup-fraction``) are
perturbed copies of earlier rows at a cosine drawn uniformly in [0.86, 0.99] (copies of copies happen), so
the pairs above 0.85 are the planted near-duplicates and their siblings.

Measured in one run:
(a) the blocked graph (forced with ``exact_max_rows=0``), ``--repeats`` times, median quoted; recall of pairs
    >= floor against exact neighbour sets of a random sample of rows (and of the whole graph when
    ``--full-exact`` or n <= 50k);
(b) exact baseline: the sample rows against all rows in 4096-row blocks, extrapolated linearly to the
    upper-triangle cost of all n rows (``t * n / sample / 2``);
(c) one LanceDB k-NN query per row (``tbl.search(v).distance_type("cosine").limit(k)``) on a real table in a
    temporary directory, flat scan and (``--lance-index``) IVF_HNSW_SQ, extrapolated linearly to n queries.

BLAS note: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in the environment change numpy's kernels; the script prints
what threadpoolctl sees so that figures can be compared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import threadpoolctl
from lancedb.index import IvfHnswSq
from lancedb.query import LanceVectorQueryBuilder
from results import Results  # bench/results.py

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from engram_pipeline.similarity import neighbour_graph  # noqa: E402


def _unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


def synthetic(
    n: int, dim: int, *, topics: int, dup_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(vectors, planted_src, planted_dst)``: unit float32 rows and the planted near-duplicate pairs."""
    rng = np.random.default_rng(seed)
    common = _unit(rng.normal(size=dim))
    supers = _unit(rng.normal(size=(max(1, topics // 40), dim)))
    centres = _unit(
        0.3 * common
        + 0.5 * supers[rng.integers(len(supers), size=topics)]
        + 0.8 * _unit(rng.normal(size=(topics, dim)))
    )
    spread = rng.uniform(0.6, 0.9, size=topics).astype(np.float32)  # cosine of a row to its centre
    weights = 1.0 / np.arange(1, topics + 1) ** 0.7
    n_dup = int(n * dup_fraction)
    n_base = n - n_dup
    x = np.empty((n, dim), dtype=np.float32)
    step = 20_000
    for start in range(0, n_base, step):
        stop = min(n_base, start + step)
        t = rng.choice(topics, size=stop - start, p=weights / weights.sum())
        r = spread[t][:, None]
        x[start:stop] = _unit(r * centres[t] + np.sqrt(1 - r**2) * _unit(rng.normal(size=(stop - start, dim))))
    # Each copy perturbs an earlier row by exactly the drawn cosine: cos(copy, source) = c.
    src = np.empty(n_dup, dtype=np.int64)
    for k, pos in enumerate(range(n_base, n)):
        src[k] = rng.integers(pos)
    cos = rng.uniform(0.86, 0.99, size=n_dup).astype(np.float32)
    for start in range(0, n_dup, step):
        sl = slice(start, min(n_dup, start + step))
        base = x[src[sl]]
        noise = rng.normal(size=base.shape).astype(np.float32)
        noise -= np.sum(noise * base, axis=1, keepdims=True) * base
        c = cos[sl][:, None]
        x[n_base + start : n_base + sl.stop] = _unit(c * base + np.sqrt(1 - c**2) * _unit(noise))
    return x, src, np.arange(n_base, n)


def exact_rows(x: np.ndarray, rows: np.ndarray, floor: float, block: int = 4096) -> np.ndarray:
    """Keys ``i * n + j`` (i < j) of every pair >= floor that involves one of ``rows``, against all rows."""
    n = x.shape[0]
    keys = []
    q = x[rows]
    for j0 in range(0, n, block):
        s = q @ x[j0 : j0 + block].T
        r, c = np.nonzero(s >= floor)
        i, j = rows[r], c + j0
        keep = i != j
        lo, hi = np.minimum(i[keep], j[keep]), np.maximum(i[keep], j[keep])
        keys.append(lo * n + hi)
    return np.unique(np.concatenate(keys))


def graph_keys(table: pa.Table, n: int) -> np.ndarray:
    i = np.asarray(table["src_id"].to_numpy(zero_copy_only=False), dtype=np.int64)
    j = np.asarray(table["dst_id"].to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.minimum(i, j) * n + np.maximum(i, j)


def lance_per_row(x: np.ndarray, rows: np.ndarray, k: int, index: bool) -> tuple[float, float, float, float | None]:
    """Seconds per query (median, mean), build seconds, and k-NN recall@k vs exact when indexed."""
    dim = x.shape[1]
    with tempfile.TemporaryDirectory() as tmp:
        db = lancedb.connect(tmp)
        data = pa.table(
            {
                "id": pa.array(np.arange(x.shape[0], dtype=np.int64)),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), dim),
            }
        )
        t0 = time.perf_counter()
        tbl = db.create_table("memories", data)
        if index:
            tbl.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
        build = time.perf_counter() - t0
        times = []
        hits = 0
        for r in rows.tolist():
            t = time.perf_counter()
            query = tbl.search(x[r])
            assert isinstance(query, LanceVectorQueryBuilder)
            res = query.distance_type("cosine").limit(k).to_arrow()
            times.append(time.perf_counter() - t)
            if index:
                truth = np.argpartition(-(x @ x[r]), k - 1)[:k]
                hits += len(set(truth.tolist()) & set(res["id"].to_pylist()))
        recall = hits / (k * len(rows)) if index else None
        return statistics.median(times), statistics.fmean(times), build, recall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--floor", type=float, default=0.85)
    ap.add_argument("--topics", type=int, default=None, help="default n // 100")
    ap.add_argument("--dup-fraction", type=float, default=0.1)
    ap.add_argument("--probes", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=None, help="default ceil(sqrt(n))")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--exact-sample", type=int, default=2000)
    ap.add_argument("--full-exact", action="store_true", help="also run the full exact graph")
    ap.add_argument("--lance-sample", type=int, default=200)
    ap.add_argument("--lance-flat-sample", type=int, default=50)
    ap.add_argument("--lance-k", type=int, default=20)
    ap.add_argument("--lance-index", action="store_true", help="also time queries with IVF_HNSW_SQ")
    ap.add_argument("--skip-lance", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    results = Results("neighbour_graph", a)

    blas = [(i["internal_api"], i.get("architecture"), i["num_threads"]) for i in threadpoolctl.threadpool_info()]
    print(f"n={a.n} dim={a.dim} floor={a.floor} probes={a.probes} blas={blas}")
    t = time.perf_counter()
    x, p_src, p_dst = synthetic(
        a.n, a.dim, topics=a.topics or max(10, a.n // 100), dup_fraction=a.dup_fraction, seed=a.seed
    )
    ids = pa.array([str(i) for i in range(a.n)])
    data_s = time.perf_counter() - t
    print(f"data: {data_s:.1f} s, {x.nbytes / 2**20:.0f} MB")
    results.add("data", rows=a.n, dim=a.dim, seconds=data_s, mb=x.nbytes / 2**20)
    rng = np.random.default_rng(a.seed + 1)

    # (a) blocked graph
    times = []
    table = None
    for _ in range(a.repeats):
        t = time.perf_counter()
        table = neighbour_graph(
            ids, x, floor=a.floor, exact_max_rows=0, probes=a.probes, partitions=a.partitions, seed=a.seed
        )
        times.append(time.perf_counter() - t)
    assert table is not None
    blocked = statistics.median(times)
    found = graph_keys(table, a.n)
    print(f"blocked: {', '.join(f'{s:.2f}' for s in times)} s; {table.num_rows} pairs")

    # (b) exact on a sample of rows against all rows
    sample = np.sort(rng.choice(a.n, size=min(a.exact_sample, a.n), replace=False))
    t = time.perf_counter()
    truth = exact_rows(x, sample, a.floor)
    t_sample = time.perf_counter() - t
    exact_extrapolated = t_sample * a.n / len(sample) / 2
    recall_sample = float(np.isin(truth, found).mean()) if truth.size else float("nan")
    planted = (p_src * a.n + p_dst)[np.einsum("ij,ij->i", x[p_src], x[p_dst]) >= a.floor]
    recall_planted = float(np.isin(planted, found).mean()) if planted.size else float("nan")

    exact_full = recall_full = None
    if a.full_exact or a.n <= 50_000:
        t = time.perf_counter()
        full = neighbour_graph(ids, x, floor=a.floor, exact_max_rows=a.n)
        exact_full = time.perf_counter() - t
        full_keys = graph_keys(full, a.n)
        recall_full = float(np.isin(full_keys, found).mean()) if full_keys.size else float("nan")

    # (c) one LanceDB query per row
    lance = {}
    if not a.skip_lance:
        flat_rows = rng.choice(a.n, size=min(a.lance_flat_sample, a.n), replace=False)
        lance["flat"] = lance_per_row(x, flat_rows, a.lance_k, index=False)
        if a.lance_index:
            idx_rows = rng.choice(a.n, size=min(a.lance_sample, a.n), replace=False)
            lance["IVF_HNSW_SQ"] = lance_per_row(x, idx_rows, a.lance_k, index=True)

    print()
    print(f"{'method':<34}{'seconds':>12}  note")
    print(f"{f'blocked graph (median of {a.repeats})':<34}{blocked:>12.2f}  {table.num_rows} pairs")
    print(f"{'  recall, sampled rows':<34}{recall_sample:>12.4f}  {truth.size} exact pairs on {len(sample)} rows")
    print(f"{'  recall, planted pairs':<34}{recall_planted:>12.4f}  {planted.size} planted pairs >= floor")
    if exact_full is not None:
        print(f"{'  recall, full exact graph':<34}{recall_full:>12.4f}")
        print(f"{'exact graph, measured':<34}{exact_full:>12.2f}")
    print(f"{'exact, extrapolated':<34}{exact_extrapolated:>12.1f}  {len(sample)} rows took {t_sample:.2f} s")
    results.add(
        "blocked_graph",
        median_s=blocked,
        runs_s=[round(s, 4) for s in times],
        pairs=table.num_rows,
        recall_sampled_rows=recall_sample,
        exact_pairs=int(truth.size),
        sampled_rows=len(sample),
        recall_planted_pairs=recall_planted,
        planted_pairs=int(planted.size),
        recall_full_exact_graph=recall_full,
    )
    results.add("exact", measured_s=exact_full, extrapolated_s=exact_extrapolated, sample_s=t_sample)
    for name, (med, mean, build, rec) in lance.items():
        per = f"p50 {med * 1e3:.1f} ms, mean {mean * 1e3:.1f} ms/query, k={a.lance_k}, build {build:.1f} s"
        if rec is not None:
            per += f", recall@k {rec:.3f}"
        print(f"{'lance per-row ' + name + ', extrap.':<34}{mean * a.n + build:>12.1f}  {per}")
        results.add(
            "lance_per_row",
            method=name,
            extrapolated_s=mean * a.n + build,
            p50_ms=med * 1e3,
            mean_ms=mean * 1e3,
            k=a.lance_k,
            build_s=build,
            recall_at_k=rec,
        )
    print()
    print(f"blocked vs exact (extrapolated): {exact_extrapolated / blocked:.1f}x faster")
    if exact_full is not None:
        print(f"blocked vs exact (measured):     {exact_full / blocked:.1f}x faster")
    for name, (_, mean, build, _) in lance.items():
        print(f"blocked vs lance per-row {name}: {(mean * a.n + build) / blocked:.1f}x faster")
    results.add(
        "blocked_faster",
        than_exact_extrapolated=exact_extrapolated / blocked,
        than_exact_measured=exact_full / blocked if exact_full is not None else None,
        **{f"than_lance_{name}": (mean * a.n + build) / blocked for name, (_, mean, build, _) in lance.items()},
    )
    results.save()


if __name__ == "__main__":
    main()
