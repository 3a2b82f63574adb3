"""Competition-aware confidence decay on a real store: formula, time consistency, pinning, archival."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from engram_pipeline.lifecycle.confidence import competition, decay_confidence, decayed
from engram_pipeline.model import CONFIDENCE_TIERS, confidence_tier

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _graph(edges: list[tuple[str, str, float]]) -> pa.Table:
    return pa.table(
        {
            "src_id": [a for a, _, _ in edges],
            "dst_id": [b for _, b, _ in edges],
            "score": pa.array([s for _, _, s in edges], pa.float32()),
        }
    )


def _add(store, mid: str, conf: float, **kw):
    return store.remember(
        "a", f"memory number {mid} about topic {mid}", memory_id=mid, confidence=conf, created_at=T0, **kw
    ).memory


def test_competition_matches_the_formula():
    conf = np.array([0.9, 0.5, 0.7])
    i, j, s = np.array([0, 1]), np.array([1, 2]), np.array([0.8, 0.65])
    comp = competition(conf, i, j, s, min_similarity=0.6)
    # row 1 competes with 0 (0.4 * 0.8) and 2 (0.2 * 0.65); row 0 and row 2 have no more confident neighbour
    # except row 2 vs row 0? not neighbours; row 2 vs row 1: 1 is less confident -> nothing
    assert comp[0] == 0.0 and comp[2] == 0.0
    assert comp[1] == pytest.approx((0.4 * 0.8 + 0.2 * 0.65) / 1.5)
    # below the similarity floor nothing competes
    assert competition(conf, i, j, s, min_similarity=0.9).sum() == 0.0


@given(
    conf=st.floats(0.0, 1.0),
    comp=st.floats(0.0, 5.0),
    rate=st.floats(0.0, 0.2),
    steps=st.integers(1, 48),
    # no subnormal days: days / steps would underflow to 0 and 0 ** 0 == 1 undoes a full decay
    days=st.floats(0.0, 30.0, allow_subnormal=False),
)
def test_decay_composes_for_a_fixed_neighbourhood(conf, comp, rate, steps, days):
    c, m = np.array([conf]), np.array([comp])
    once = decayed(c, m, np.array([days]), rate=rate)
    for _ in range(steps):
        c = decayed(c, m, np.array([days / steps]), rate=rate)
    assert abs(c[0] - once[0]) <= 1e-6


def test_decay_applies_the_formula_and_is_idempotent(store):
    _add(store, "hi", 0.9)
    _add(store, "lo", 0.5)
    _add(store, "alone", 0.8)
    g = _graph([("hi", "lo", 0.8)])
    now = T0 + timedelta(days=1)
    rep = decay_confidence(store, "a", graph=g, now=now)
    assert (rep.decayed_count, rep.archived_count, rep.skipped_concurrent_edit, rep.processed) == (3, 0, 0, 3)
    rate = store.settings.confidence_decay_rate
    got = {r["id"]: r for r in store.get_many(["hi", "lo", "alone"])}
    assert got["hi"]["confidence"] == pytest.approx(0.9 * (1 - rate))
    m = 1 + (0.4 * 0.8) / 1.5
    assert got["lo"]["confidence"] == pytest.approx(0.5 * (1 - rate * m))
    assert got["alone"]["confidence"] == pytest.approx(0.8 * (1 - rate))
    assert got["lo"]["decayed_at"] == now
    # crowded fades faster than unique
    assert got["lo"]["confidence"] / 0.5 < got["alone"]["confidence"] / 0.8
    versions = {k: v["version"] for k, v in got.items()}
    again = decay_confidence(store, "a", graph=g, now=now)
    assert (again.decayed_count, again.archived_count) == (0, 0)
    assert {r["id"]: r["version"] for r in store.get_many(list(versions))} == versions


@pytest.mark.slow
@hyp_settings(max_examples=3, deadline=None)
@given(confs=st.lists(st.floats(0.55, 0.99), min_size=3, max_size=3))
def test_hourly_runs_equal_one_daily_run(tmp_path_factory, confs):
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore

    stores = []
    for name in ("hourly", "daily"):
        store = MemoryStore.open(
            str(tmp_path_factory.mktemp(name)),
            settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_CONFIDENCE_DECAY_RATE": "0.2"}),
        )
        for k, c in enumerate(confs):
            _add(store, f"m{k}", c)
        stores.append(store)
    hourly, daily = stores
    # a fixed neighbourhood: isolated rows (competition stays 0); rate 0.2 keeps them above the archive floor
    empty = _graph([])
    for h in range(1, 25):
        decay_confidence(hourly, "a", graph=empty, now=T0 + timedelta(hours=h))
    decay_confidence(daily, "a", graph=empty, now=T0 + timedelta(days=1))
    ids = [f"m{k}" for k in range(3)]
    a = {r["id"]: r["confidence"] for r in hourly.get_many(ids)}
    b = {r["id"]: r["confidence"] for r in daily.get_many(ids)}
    for k in ids:
        assert abs(a[k] - b[k]) <= 1e-6


def test_hourly_with_competition_stays_close(store, tmp_path):
    """With competitors the neighbourhood moves between hourly runs: close, not exact (second order)."""
    from engram_pipeline.store import MemoryStore

    daily = MemoryStore.open(str(tmp_path / "daily"), settings=store.settings)
    for st_ in (store, daily):
        _add(st_, "hi", 0.95)
        _add(st_, "lo", 0.6)
    g = _graph([("hi", "lo", 0.9)])
    for h in range(1, 25):
        decay_confidence(store, "a", graph=g, now=T0 + timedelta(hours=h))
    decay_confidence(daily, "a", graph=g, now=T0 + timedelta(days=1))
    a = store.get("lo", track_access=False)["confidence"]
    b = daily.get("lo", track_access=False)["confidence"]
    assert abs(a - b) < 1e-5
    assert store.get("hi", track_access=False)["confidence"] == pytest.approx(
        daily.get("hi", track_access=False)["confidence"], abs=1e-9
    )


def test_pinned_rows_hold_and_faded_rows_are_archived_and_restorable(seed_store):
    store = seed_store  # confidence alone archives under the `seed` retention policy
    _add(store, "pin", 0.41, pinned=True)
    _add(store, "fade", 0.41)
    now = T0 + timedelta(days=30)
    rep = decay_confidence(store, "a", graph=_graph([]), now=now)
    assert rep.archived_count == 1 and rep.decayed_count == 0
    pin = store.get("pin", track_access=False)
    assert pin["confidence"] == pytest.approx(0.41) and pin["status"] == "active" and pin["decayed_at"] == now
    fade = store.get("fade", track_access=False)
    assert fade["status"] == "archived" and fade["confidence"] < 0.40
    assert all(h.memory["id"] != "fade" for h in store.recall("a", "memory number fade topic", k=10))
    assert any(h.memory["id"] == "fade" for h in store.recall("a", "memory number fade", include_archived=True))
    back = store.restore("fade")
    assert back["status"] == "active" and back["confidence"] == pytest.approx(0.41)


def test_decay_builds_the_graph_when_none_is_given(store):
    store.remember("a", "User lives in Berlin", created_at=T0, confidence=0.9)
    store.remember("a", "The user lives in Berlin now", created_at=T0, confidence=0.5)
    rep = decay_confidence(store, "a", now=T0 + timedelta(days=2))
    assert rep.decayed_count == 2 and rep.processed == 2


def test_tiers_and_recall_filters(store):
    for mid, c in (("h", 0.9), ("w", 0.75), ("c", 0.5)):
        store.remember("a", f"fact {mid} about coffee", memory_id=mid, confidence=c)
    assert [confidence_tier(x) for x in (0.86, 0.85, 0.7, 0.69, 0.4, 0.39)] == [
        "hot",
        "warm",
        "warm",
        "cold",
        "cold",
        "archive",
    ]
    assert set(CONFIDENCE_TIERS) == {"hot", "warm", "cold", "archive"}
    hot = store.recall("a", "fact about coffee", tiers=["hot"], track_access=False)
    assert [h.memory["id"] for h in hot] == ["h"]
    warm_cold = store.recall("a", "fact about coffee", tiers=["warm", "cold"], track_access=False)
    assert {h.memory["id"] for h in warm_cold} == {"w", "c"}
    assert {h.memory["id"] for h in store.recall("a", "coffee", min_confidence=0.7, track_access=False)} == {"h", "w"}


def test_a_killed_run_resumes_with_its_now_after_its_last_batch(store):
    for mid in ("a1", "b1", "c1", "d1"):
        _add(store, mid, 0.8)
    then = T0 + timedelta(days=2)
    # what a run killed after its first batch (rows up to "b1") leaves behind
    store.engine.set_cursor(
        "confidence_decay",
        "a",
        {
            "run_id": "r1",
            "now": then.isoformat(),
            "after": "b1",
            "done": False,
            "batches": 1,
            "resumed": 0,
            "counts": {"decayed": 2},
        },
    )
    rep = decay_confidence(store, "a", graph=_graph([]), now=T0 + timedelta(days=9))
    assert rep.decayed_count == 4 and rep.cursor["resumed"] == 1 and rep.cursor["done"]
    rows = {r["id"]: r for r in store.get_many(["a1", "b1", "c1", "d1"])}
    assert rows["a1"]["version"] == 1 and rows["b1"]["version"] == 1  # done before the kill: not rewritten
    assert rows["c1"]["decayed_at"] == then and rows["d1"]["decayed_at"] == then  # the run's own now
    assert store.engine.get_cursor("confidence_decay", "a")["done"] is True


def test_tier_ranges_partition_the_unit_interval_as_confidence_tier_does(store):
    # the recall filter (SQL from CONFIDENCE_TIERS) and health's confidence_tier come from one definition:
    # every boundary and a grid between them land in exactly one tier, the same one both ways
    points = sorted({i / 20 for i in range(21)} | {0.85, 0.7, 0.4, 0.8500001, 0.6999999, 0.3999999})
    for i, c in enumerate(points):
        # a distinct made-up word per row, so write-time dedup keeps every point
        word = hashlib.sha1(str(i).encode()).hexdigest()[:12]
        store.remember("grid", f"grid point {word}", memory_id=f"g{i}", confidence=c)
    for name, r in CONFIDENCE_TIERS.items():
        inside = {
            f"g{i}"
            for i, c in enumerate(points)
            if (c > r.low or (r.low_inclusive and c == r.low)) and (c < r.high or (r.high_inclusive and c == r.high))
        }
        assert inside == {f"g{i}" for i, c in enumerate(points) if confidence_tier(c) == name}
        hits = store.recall("grid", "grid point", tiers=[name], k=100, track_access=False)
        assert {h.memory["id"] for h in hits} == inside, name
