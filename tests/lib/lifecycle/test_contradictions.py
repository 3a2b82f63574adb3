"""Batch contradiction pass over the neighbour graph: flag, supersede, idempotence, concurrent edits.

Rows are inserted the way a bulk import does (``insert_rows``, without the write-time checks), with hand-made
vectors whose cosines are exact, so the pass is what finds the contradictions.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.lifecycle.graph import CANDIDATES_PER_ROW, agent_graph, graph_floor
from engram_pipeline.model import loads_metadata, rows_to_table
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.core import ShardedEngine

THRESHOLDS = dict(
    duplicate_threshold=0.97, merge_threshold=0.85, contradiction_threshold=0.8, contradiction_threshold_max=0.97
)
VOLATILE = ("version", "updated_at", "write_token")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def at_cosine(base: np.ndarray, cosine: float, seed: int) -> np.ndarray:
    w = np.random.default_rng(seed).normal(size=base.shape)
    w = unit(w - (w @ base) * base)
    return unit(cosine * base + np.sqrt(1 - cosine**2) * w)


def topic(seed: int) -> np.ndarray:
    return unit(np.random.default_rng(seed).normal(size=384))


def put(store: MemoryStore, content: str, vector: np.ndarray | None, *, age_days: float = 0, **fields: Any) -> str:
    """Insert a row as an import would: no write-time dedup or contradiction check."""
    row = store.engine.new_row("a", content, created_at=T0 - timedelta(days=age_days))
    row.update(fields, vector=None if vector is None else [float(x) for x in vector])
    if vector is None:  # merge_insert refuses null vectors; a plain append (as old imports did) keeps them
        store.engine.memories.add(rows_to_table([row], store.engine.memory_schema))
    else:
        store.engine.insert_rows([row])
    return str(row["id"])


def strip(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in VOLATILE}


def versions(store: MemoryStore) -> dict[str, int]:
    return {r["id"]: r["version"] for r in store.list_memories("a")}


@pytest.fixture
def store(tmp_path: Path, settings: Settings) -> MemoryStore:
    return MemoryStore.open(str(tmp_path / "store"), settings=settings.replace(**THRESHOLDS))


def berlin_munich(store: MemoryStore) -> tuple[str, str, np.ndarray]:
    b = topic(0)
    old = put(store, "User lives in Berlin", b, age_days=10)
    new = put(store, "User lives in Munich", at_cosine(b, 0.9, 1), age_days=1)
    return old, new, b


def test_graph_floor_is_the_lowest_band_any_pass_needs(store: MemoryStore) -> None:
    s = store.settings
    assert graph_floor(s) == min(s.contradiction_threshold, s.merge_threshold, s.competition_min_similarity)
    b = topic(0)
    x = put(store, "one", b)
    y = put(store, "two", at_cosine(b, 0.7, 1))
    put(store, "far away", topic(5))
    put(store, "hidden", at_cosine(b, 0.95, 2), status="superseded")
    put(store, "no vector", None)
    graph = agent_graph(store, "a")
    assert {frozenset((r["src_id"], r["dst_id"])) for r in graph.to_pylist()} == {frozenset((x, y))}
    assert agent_graph(store, "a", floor=0.8).num_rows == 0


def test_flag_marks_both_rows_links_them_and_keeps_them_in_recall(store: MemoryStore) -> None:
    old, new, b = berlin_munich(store)
    c = topic(7)  # an agreeing pair in the band is judged and left alone
    p = put(store, "The deploy runs every night", c)
    q = put(store, "Every night the deploy runs", at_cosine(c, 0.9, 3))
    report = detect_contradictions(store, "a")
    assert (report.scanned, report.candidates, report.flagged, report.superseded) == (4, 2, 1, 0)
    assert report.skipped_concurrent_edit == 0 and report.cursor["done"]
    a, n = store.get(old, track_access=False), store.get(new, track_access=False)
    assert a["status"] == n["status"] == "contradicted"
    assert a["contradiction_with"] == [new] and n["contradiction_with"] == [old]
    for row, partner in ((a, new), (n, old)):
        (entry,) = loads_metadata(row)["contradictions"]
        assert entry["with"] == partner and "value swap" in entry["reason"] and entry["at"]
    (link,) = store.engine.links_of([old], rel="contradicts")
    assert (link["src_id"], link["dst_id"]) == (new, old)  # newer -> older
    assert link["score"] == pytest.approx(0.9, abs=1e-4) and link["run_id"] == report.cursor["run_id"]
    assert {store.get(i, track_access=False)["status"] for i in (p, q)} == {"active"}
    hits = {h.memory["id"] for h in store.recall("a", vector=b.tolist(), k=5, track_access=False)}
    assert {old, new} <= hits


def test_second_run_changes_nothing(store: MemoryStore) -> None:
    berlin_munich(store)
    detect_contradictions(store, "a")
    before = versions(store)
    links = store.engine.links_for_agent("a").num_rows
    again = detect_contradictions(store, "a")
    assert (again.candidates, again.flagged) == (0, 0)
    assert versions(store) == before and store.engine.links_for_agent("a").num_rows == links


def test_pairs_outside_the_band_or_hidden_are_not_candidates(store: MemoryStore) -> None:
    b = topic(0)
    put(store, "User lives in Berlin", b)
    put(store, "User lives in Munich", at_cosine(b, 0.7, 1))  # below the band
    put(store, "User lives in Paris", at_cosine(b, 0.9, 2), status="superseded")  # hidden
    put(store, "User lives in Rome", at_cosine(b, 0.9, 3), superseded_by="someone")  # hidden
    before = versions(store)
    report = detect_contradictions(store, "a")
    assert (report.candidates, report.flagged) == (0, 0)
    assert versions(store) == before


def test_contradiction_veto_above_the_duplicate_threshold_is_flagged(store: MemoryStore) -> None:
    b = topic(0)
    put(store, "User lives in Berlin", b)
    put(store, "User lives in Munich", at_cosine(b, 0.99, 1))
    assert detect_contradictions(store, "a").flagged == 1


def test_candidates_per_row_are_bounded_and_a_change_among_many_near_duplicates_is_still_flagged(
    store: MemoryStore,
) -> None:
    # 24 statements of one value (a turn prefix keeps them apart; the rules drop it), closer to each other
    # (~0.92) than to the change (~0.82): every pair is in the band (276 + 24), but each row's nearest are its
    # own kind, except the change's, which are the old ones.
    b = topic(0)
    same = [
        put(store, f"(turn {i}) User lives in Berlin", at_cosine(b, 0.96, 10 + i), age_days=30 - i) for i in range(24)
    ]
    moved = put(store, "User lives in Munich", at_cosine(b, 0.85, 99), age_days=1)
    whole = agent_graph(store, "a")
    assert whole.num_rows == 25 * 24 // 2
    report = detect_contradictions(store, "a")
    assert report.candidates <= 25 * CANDIDATES_PER_ROW < whole.num_rows
    assert report.flagged == CANDIDATES_PER_ROW  # the change against its nearest old statements
    flagged_with = store.get(moved, track_access=False)["contradiction_with"]
    assert len(flagged_with) == CANDIDATES_PER_ROW and set(flagged_with) <= set(same)


def test_under_supersede_a_row_the_pass_hid_keeps_its_place_so_a_second_run_judges_nothing_new(
    store: MemoryStore,
) -> None:
    b = topic(0)
    for i in range(24):
        put(store, f"(turn {i}) User lives in Berlin", at_cosine(b, 0.96, 10 + i), age_days=30 - i)
    put(store, "User lives in Munich", at_cosine(b, 0.85, 99), age_days=1)
    first = detect_contradictions(store, "a", policy="supersede")
    assert first.superseded == CANDIDATES_PER_ROW  # the old statements nearest the change, not all 24
    before = versions(store)
    # ranked among the visible rows only, the next 8 old statements would now be the change's nearest
    again = detect_contradictions(store, "a", policy="supersede")
    assert again.superseded == 0 and versions(store) == before


def test_a_precomputed_whole_graph_gives_the_same_bounded_candidates(tmp_path: Path, settings: Settings) -> None:
    reports = []
    for name, whole in (("own", False), ("given", True)):
        s = MemoryStore.open(str(tmp_path / name), settings=settings.replace(**THRESHOLDS))
        b = topic(0)
        for i in range(20):
            put(s, f"(turn {i}) User lives in Berlin", at_cosine(b, 0.96, 10 + i), age_days=30 - i)
        put(s, "User lives in Munich", at_cosine(b, 0.85, 99), age_days=1)
        graph = agent_graph(s, "a") if whole else None
        r = detect_contradictions(s, "a", graph=graph, now=T0, run_id="r")
        reports.append((r.candidates, r.flagged, sorted(x["content"] for x in s.list_memories("a"))))
    assert reports[0] == reports[1]


def test_supersede_hides_the_older_row_audited_and_restorable(store: MemoryStore) -> None:
    old, new, b = berlin_munich(store)
    original = store.get(old, track_access=False)
    report = detect_contradictions(store, "a", policy="supersede")
    assert (report.flagged, report.superseded) == (0, 1)
    hidden = store.get(old, track_access=False)
    assert hidden["status"] == "superseded" and hidden["superseded_by"] == new
    assert loads_metadata(hidden)["superseded"]["by"] == new
    assert store.get(new, track_access=False)["status"] == "active"
    assert [h.memory["id"] for h in store.recall("a", vector=b.tolist(), k=5, track_access=False)] == [new]
    (link,) = store.engine.links_of([old], rel="supersedes")
    assert (link["src_id"], link["dst_id"]) == (new, old)
    (event,) = [e for e in store.audit_events(old) if e["action"] == "supersede"]
    assert event["actor"] == "contradiction_detection" and event["before"]
    before = versions(store)
    assert detect_contradictions(store, "a", policy="supersede").superseded == 0
    assert versions(store) == before
    assert strip(store.restore(old)) == strip(original)


def test_supersede_hides_an_older_row_behind_the_newest_contradicting_one(store: MemoryStore) -> None:
    b = topic(0)
    oldest = put(store, "User lives in Berlin", b, age_days=30)
    mid = put(store, "User lives in Munich", at_cosine(b, 0.9, 1), age_days=20)
    newest = put(store, "User lives in Paris", at_cosine(b, 0.9, 2), age_days=10)
    detect_contradictions(store, "a", policy="supersede")
    rows = {r["id"]: r for r in store.list_memories("a")}
    assert rows[newest]["superseded_by"] is None and rows[newest]["status"] == "active"
    assert rows[oldest]["superseded_by"] == newest
    assert rows[mid]["superseded_by"] == newest


def test_precomputed_graph_gives_the_same_result(store: MemoryStore) -> None:
    berlin_munich(store)
    graph = agent_graph(store, "a")
    assert detect_contradictions(store, "a", graph=graph).flagged == 1
    assert detect_contradictions(store, "a", graph=graph).flagged == 0


def test_small_batches_and_resume_from_cursor(store: MemoryStore) -> None:
    pairs = []
    for i, city in enumerate(("Berlin", "Paris", "Rome", "Oslo")):
        b = topic(100 + i)
        pairs.append(
            (
                put(store, f"Project {i} is based in {city}", b),
                put(store, f"Project {i} is based in Lima", at_cosine(b, 0.9, i)),
            )
        )
    report = detect_contradictions(store, "a", batch_size=1)
    assert report.flagged == 4 and report.cursor["batches"] == 4
    for x, y in pairs:
        assert store.get(x, track_access=False)["contradiction_with"] == [y]


class EditBeforeWrite(ShardedEngine):
    """The real store, with an agent's edit landing just before the pass's first compare-and-set."""

    edits: list[Any]

    def cas_write(self, *args: Any, **kwargs: Any) -> Any:
        while getattr(self, "edits", None):
            self.edits.pop()()
        return super().cas_write(*args, **kwargs)


def test_content_edited_under_the_pass_is_skipped_not_overwritten(tmp_path: Path, settings: Settings) -> None:
    store = MemoryStore(EditBeforeWrite.open(str(tmp_path / "s"), settings=settings.replace(**THRESHOLDS)))
    old, new, _ = berlin_munich(store)
    store.engine.edits = [lambda: store.update(old, expected_version=1, content="User lives in Munich too")]
    report = detect_contradictions(store, "a")
    assert report.skipped_concurrent_edit == 1
    edited = store.get(old, track_access=False)
    assert edited["content"] == "User lives in Munich too" and edited["status"] == "active"
    assert edited["version"] == 2 and edited["contradiction_with"] == []


def test_edit_that_keeps_the_content_is_re_read_and_marked(tmp_path: Path, settings: Settings) -> None:
    store = MemoryStore(EditBeforeWrite.open(str(tmp_path / "s"), settings=settings.replace(**THRESHOLDS)))
    old, new, _ = berlin_munich(store)
    store.engine.edits = [lambda: store.update(old, expected_version=1, tags=["home"])]
    report = detect_contradictions(store, "a")
    assert (report.flagged, report.skipped_concurrent_edit) == (1, 0)
    row = store.get(old, track_access=False)
    assert row["tags"] == ["home"] and row["status"] == "contradicted" and row["version"] == 3
