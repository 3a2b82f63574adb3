"""Health report of one agent: shares, tiers, contradictions, growth, the score, and the PNG chart."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from engram_pipeline.lifecycle.health import WEIGHTS, health, health_chart

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def test_an_empty_agent_is_healthy(store):
    report = health(store, "nobody", now=NOW)
    assert report.score == 1.0 and report.total == 0
    assert report.tiers == {"hot": 0, "warm": 0, "cold": 0, "archive": 0}


def test_health_counts_and_score(store):
    old = NOW - timedelta(days=60)
    store.remember("a", "User drinks green tea", confidence=0.9, created_at=old)  # hot, stale
    store.remember("a", "User plays chess on Sundays", confidence=0.75, created_at=NOW - timedelta(days=3))
    store.remember("a", "User owns a red bicycle", confidence=0.3, created_at=NOW - timedelta(days=10))
    store.remember("a", "User lives in Berlin", confidence=0.8, created_at=NOW - timedelta(days=1))
    store.remember("a", "User lives in Munich", confidence=0.8, created_at=NOW - timedelta(days=1))
    gone = store.remember("a", "User collects stamps", confidence=0.6, created_at=NOW - timedelta(days=2)).memory
    row = store.get(gone["id"], track_access=True)  # read once, then archived
    store.engine.cas_write(
        [{"id": row["id"], "version": row["version"], "status": "archived"}], actor="t", action="archive", audit=True
    )
    report = health(store, "a", now=NOW)
    assert report.total == 6 and report.visible == 5
    assert report.tiers == {"hot": 1, "warm": 3, "cold": 0, "archive": 1}
    assert report.active_contradictions == 1  # Berlin / Munich, flagged at write time
    assert report.contradicted_share == pytest.approx(2 / 5)
    assert report.stale_count == 1
    assert report.never_recalled_share == pytest.approx(1.0)
    assert (report.growth_7d, report.growth_30d) == (4, 5)
    assert report.archived_share == pytest.approx(1 / 6) and report.superseded_share == 0.0
    expected = 1 - (
        WEIGHTS["contradiction"] * 2 / 5
        + WEIGHTS["duplicate"] * report.duplicate_cluster_ratio
        + WEIGHTS["stale"] * 1 / 5
        + WEIGHTS["low_confidence"] * 1 / 5
    )
    assert report.score == pytest.approx(expected, abs=1e-6)
    assert json.loads(json.dumps(report.as_dict()))["tiers"]["warm"] == 3


def test_duplicate_ratio_from_the_pending_merge_plan(store):
    # the calibrated judge collapses "enjoys" at write time
    store.engine.settings = store.settings.replace(judge="rules")
    ids = [store.remember("a", t).memory["id"] for t in ("User likes jazz", "User enjoys jazz", "User owns a cat")]
    store.engine.save_plan("a", {"clusters": [{"canonical": {"id": ids[0]}, "members": [{"id": ids[1]}]}]})
    report = health(store, "a", now=NOW)
    assert report.duplicate_source == "plan"
    assert report.duplicate_cluster_ratio == pytest.approx(2 / 3)


def test_health_chart_writes_a_png(store, tmp_path):
    for k, c in enumerate((0.9, 0.8, 0.5, 0.2)):
        store.remember("a", f"User fact {'abcd'[k]} about things", confidence=c)
    out = tmp_path / "health.png"
    report = health_chart(store, "a", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sum(report.tiers.values()) == report.visible


def test_imported_near_duplicates_above_the_duplicate_threshold_count_without_a_plan(store):
    # Import removes exact duplicates only and leaves the rest to the merge: health must still see them.
    base = store.engine.embed(["The deploy runs every night at two"])[0]
    rows = []
    for text in ("The deploy runs every night at two", "The deploy runs every night at two.", "User owns a cat"):
        row = store.engine.new_row("a", text)
        row["vector"] = (base if "deploy" in text else store.engine.embed([text])[0]).tolist()
        rows.append(row)
    store.engine.insert_rows(rows)
    report = health(store, "a", now=NOW)
    assert report.duplicate_source == "graph"
    assert report.duplicate_cluster_ratio == pytest.approx(2 / 3)


def test_health_reports_the_noise_share_and_what_the_next_archival_takes(store):
    from engram_pipeline.lifecycle.pipeline import run_pipeline

    old = NOW - timedelta(days=45)
    for text in ("Dana: haha yes", "Sam: thanks!!", "ok cool"):
        store.remember("a", text, created_at=old)
    store.remember("a", "lol same", created_at=NOW - timedelta(days=2))  # noise, but young
    store.remember("a", "Dana: my sister lives in Oslo", created_at=old)
    report = health(store, "a", now=NOW)
    assert (report.noise_count, report.noise_share) == (4, pytest.approx(4 / 5))
    assert (report.next_archive_noise, report.next_archive_faded) == (3, 0)
    after = run_pipeline(store, "a", now=NOW).health  # the pipeline's own report comes after archival
    assert (after.noise_count, after.next_archive_noise, after.visible) == (1, 0, 2)
    assert json.loads(json.dumps(after.as_dict()))["noise_share"] == pytest.approx(0.5)
