"""The neighbour graph (exact and blocked paths) and the shared clustering helpers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from engram_pipeline.similarity import (
    PAIRS_SCHEMA,
    average_linkage,
    components,
    nearest_graph,
    nearest_per_row,
    neighbour_graph,
    star_clusters,
)


def _unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int, *, topics: int, seed: int = 0) -> np.ndarray:
    """Broad topics (rows at cosine 0.6-0.9 from their centre) plus 10% near-duplicates at 0.86-0.99."""
    rng = np.random.default_rng(seed)
    centres = _unit(rng.normal(size=(topics, dim)))
    n_dup = n // 10
    t = rng.integers(topics, size=n - n_dup)
    r = rng.uniform(0.6, 0.9, size=(n - n_dup, 1))
    base = _unit(r * centres[t] + np.sqrt(1 - r**2) * _unit(rng.normal(size=(n - n_dup, dim))))
    src = rng.integers(n - n_dup, size=n_dup)
    c = rng.uniform(0.86, 0.99, size=(n_dup, 1))
    noise = rng.normal(size=(n_dup, dim))
    noise -= np.sum(noise * base[src], axis=1, keepdims=True) * base[src]
    dups = _unit(c * base[src] + np.sqrt(1 - c**2) * _unit(noise))
    return np.ascontiguousarray(np.concatenate([base, dups]), dtype=np.float32)


def _brute(x: np.ndarray, floor: float) -> dict[tuple[int, int], float]:
    s = x @ x.T
    i, j = np.nonzero(np.triu(s >= floor, k=1))
    return {(a, b): float(s[a, b]) for a, b in zip(i.tolist(), j.tolist(), strict=True)}


def _positions(table: pa.Table) -> dict[tuple[int, int], float]:
    src = [int(v) for v in table["src_id"].to_pylist()]
    dst = [int(v) for v in table["dst_id"].to_pylist()]
    return dict(zip(zip(src, dst, strict=True), table["score"].to_pylist(), strict=True))


def _ids(n: int) -> list[str]:
    return [str(i) for i in range(n)]


def test_exact_path_equals_brute_force() -> None:
    x = clustered(600, 32, topics=5)
    floor = 0.7
    got = neighbour_graph(_ids(600), x, floor=floor, block_size=128)  # several tiles, diagonal and not
    assert got.schema == PAIRS_SCHEMA
    want = _brute(x, floor)
    have = _positions(got)
    # Float32 products in another order may flip a pair lying on the floor itself.
    borderline = {p for p, s in {**want, **have}.items() if abs(s - floor) < 1e-5}
    assert set(have) - borderline == set(want) - borderline
    for pair, score in have.items():
        assert pair[0] < pair[1]
        assert score == pytest.approx(want.get(pair, score), abs=1e-5)
    assert len(want) > 100


def test_blocked_path_recall_and_shape() -> None:
    n = 30_000
    x = clustered(n, 64, topics=5, seed=1)  # each topic spans dozens of partitions
    ids = _ids(n)
    exact = _positions(neighbour_graph(ids, x, floor=0.85))
    blocked_table = neighbour_graph(ids, x, floor=0.85, exact_max_rows=1_000)
    blocked = _positions(blocked_table)
    assert len(exact) > 2_000
    recall = len(set(blocked) & set(exact)) / len(exact)
    assert recall >= 0.95, recall
    assert set(blocked) <= set(exact) | {p for p, s in blocked.items() if abs(s - 0.85) < 1e-5}
    assert min(blocked_table["score"].to_pylist()) >= 0.85
    assert len(blocked) == blocked_table.num_rows  # no pair twice
    assert all(i < j for i, j in blocked)
    again = neighbour_graph(ids, x, floor=0.85, exact_max_rows=1_000)
    assert again.equals(blocked_table)  # deterministic for a seed
    # The data does straddle partitions: without probes many pairs are missed.
    home_only = _positions(neighbour_graph(ids, x, floor=0.85, exact_max_rows=1_000, probes=0))
    assert len(home_only) < 0.8 * len(exact)


def test_nearest_graph_is_the_whole_graph_cut_to_each_rows_nearest_without_computing_it() -> None:
    x = clustered(900, 32, topics=4, seed=3)
    x[5] = x[4]  # exact twins tie with each other's other neighbours: the cut is by (score, id) all the same
    x[6] = x[4]
    ids = _ids(900)
    whole = neighbour_graph(ids, x, floor=0.6)
    for k in (1, 4, 8):
        got = nearest_graph(ids, x, floor=0.6, k=k)
        assert got.schema == PAIRS_SCHEMA
        assert got.equals(nearest_per_row(whole, k))
        assert got.num_rows <= 900 * k < whole.num_rows  # linear in the rows, where the graph is not
    # above exact_max_rows: the blocked graph, cut the same way
    blocked = nearest_graph(ids, x, floor=0.6, k=4, exact_max_rows=100)
    assert blocked.equals(nearest_per_row(neighbour_graph(ids, x, floor=0.6, exact_max_rows=100), 4))
    assert nearest_graph(["a"], x[:1], floor=0.5, k=3).num_rows == 0
    with pytest.raises(ValueError, match="k must be positive"):
        nearest_graph(ids, x, floor=0.6, k=0)


def test_invalid_rows_skipped_and_vectors_normalised() -> None:
    x = clustered(200, 16, topics=3, seed=2)
    raw = x * np.random.default_rng(0).uniform(0.5, 3.0, size=(200, 1)).astype(np.float32)
    raw[5] = 0.0
    raw[7, 3] = np.nan
    raw[9, 0] = np.inf
    got = _positions(neighbour_graph(_ids(200), raw, floor=0.6))
    assert got
    assert not {i for pair in got for i in pair} & {5, 7, 9}
    valid = np.ones(200, dtype=bool)
    valid[[5, 7, 9]] = False
    want = _brute(np.where(valid[:, None], x, 0), 0.6)
    assert set(got) == set(want)


def test_ids_preserved_and_trivial_inputs() -> None:
    v = np.array([[1, 0, 0], [0.99, 0.141, 0], [0, 0, 1], [0, 0.02, 1]], dtype=np.float32)
    ids = pa.array(["zeta", "alpha", "m1", "m0"], type=pa.large_string())
    got = neighbour_graph(ids, v, floor=0.9)
    assert got.column("src_id").to_pylist() == ["zeta", "m1"]  # input order, not id order
    assert got.column("dst_id").to_pylist() == ["alpha", "m0"]
    assert got.column("score").to_pylist() == pytest.approx([0.99, 0.9998], abs=1e-3)
    assert neighbour_graph(["a"], v[:1], floor=0.5).num_rows == 0
    assert neighbour_graph([], np.zeros((0, 3), np.float32), floor=0.5).schema == PAIRS_SCHEMA
    with pytest.raises(ValueError, match="one row per id"):
        neighbour_graph(["a", "b"], v, floor=0.5)


def _pairs(rows: list[tuple[str, str, float]]) -> pa.Table:
    src, dst, score = zip(*rows, strict=True)
    return pa.table({"src_id": src, "dst_id": dst, "score": pa.array(score, pa.float32())})


def test_star_clusters_never_chain() -> None:
    # A~B and B~C in band, A~C below it.
    pairs = _pairs([("A", "B", 0.9), ("B", "C", 0.9), ("A", "C", 0.5)])
    assert star_clusters(pairs, ["A", "B", "C"], 0.85, 0.97) == [("A", [("B", pytest.approx(0.9))])]
    # B first takes both; each is in band with B.
    got = star_clusters(pairs, ["B", "A", "C"], 0.85, 0.97)
    assert [(c, [m for m, _ in ms]) for c, ms in got] == [("B", ["A", "C"])]


def test_star_clusters_band_eligibility_and_order() -> None:
    pairs = _pairs([("A", "B", 0.99), ("A", "C", 0.9), ("A", "D", 0.86), ("C", "D", 0.92), ("E", "F", 0.88)])
    # 0.99 is at or above hi (a duplicate, not a merge candidate): B is left out.
    got = star_clusters(pairs, ["A", "C", "E", "F"], 0.85, 0.97, eligible=lambda c, m: (c, m) != ("A", "D"))
    assert got == [
        ("A", [("C", pytest.approx(0.9))]),
        ("E", [("F", pytest.approx(0.88))]),
    ]
    for _, members in got:
        for _member, score in members:
            assert 0.85 <= score < 0.97
    shuffled = pairs.take([4, 2, 0, 3, 1])
    assert star_clusters(shuffled, ["A", "C", "E", "F"], 0.85, 0.97) == star_clusters(
        pairs, ["A", "C", "E", "F"], 0.85, 0.97
    )


def test_average_linkage_does_not_chain_where_components_do() -> None:
    # a chain: each row 0.9 similar to the next, unrelated to the rest (small talk linked turn by turn)
    n = 10
    s = np.eye(n)
    for i in range(n - 1):
        s[i, i + 1] = s[i + 1, i] = 0.9
    ids = [f"r{i}" for i in range(n)]
    chain = _pairs([(ids[i], ids[i + 1], 0.9) for i in range(n - 1)])
    assert components(chain, 0.6) == [sorted(ids)]
    assert max(map(len, average_linkage(s, 0.6))) == 2
    # a topic: every pair 0.7 similar, plus one row 0.65 similar to two of them only
    t = np.full((5, 5), 0.7)
    t[4, :] = t[:, 4] = [0.65, 0.65, 0.0, 0.0, 1.0]
    np.fill_diagonal(t, 1.0)
    assert average_linkage(t, 0.6) == [[0, 1, 2, 3], [4]]
    assert average_linkage(np.eye(0), 0.6) == [] and average_linkage(np.eye(1), 0.6) == [[0]]


def test_components() -> None:
    pairs = _pairs([("a", "b", 0.9), ("b", "c", 0.86), ("d", "e", 0.99), ("x", "y", 0.5), ("e", "f", 0.97)])
    assert components(pairs, 0.85) == [["a", "b", "c"], ["d", "e", "f"]]
    assert components(pairs, 0.85, 0.97) == [["a", "b", "c"]]
    assert components(pairs, 0.995) == []


def test_a_pairs_score_does_not_depend_on_the_tiles_that_found_it() -> None:
    # A float32 matrix product rounds differently with its shape (and the machine's BLAS kernel); a stored,
    # rounded score must not change because an agent has a few more rows or a resumed run tiles differently.
    rng = np.random.default_rng(7)
    base = rng.standard_normal((60, 384)).astype(np.float32)
    near = base + 0.15 * rng.standard_normal(base.shape).astype(np.float32)
    v = np.vstack([base, near])
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    ids = [str(i) for i in range(len(v))]
    runs = [neighbour_graph(ids, v, floor=0.5, block_size=b).to_pylist() for b in (1, 7, 4096)]
    blocked = neighbour_graph(ids, v, floor=0.5, exact_max_rows=10, partitions=4, probes=3).to_pylist()
    assert len(runs[0]) >= 60
    assert runs[0] == runs[1] == runs[2]
    assert {(e["src_id"], e["dst_id"]): e["score"] for e in blocked}.items() <= {
        (e["src_id"], e["dst_id"]): e["score"] for e in runs[0]
    }.items()
    exact = {
        (e["src_id"], e["dst_id"]): float(np.float32(v[int(e["src_id"])].astype(np.float64) @ v[int(e["dst_id"])]))
        for e in runs[0]
    }
    assert {(e["src_id"], e["dst_id"]): e["score"] for e in runs[0]} == exact
