"""Promotion, confidence decay, contradiction detection and archival SIGKILLed in each commit window and then resumed
report the whole run: the same counts as an uninterrupted twin, over the same rows, links and audit events
(real child processes on a real LanceDB directory; decay and the merge apply have their own files)."""

from __future__ import annotations

import json
import shutil
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_pipeline.lifecycle.archival import archive_faded
from engram_pipeline.lifecycle.confidence import decay_confidence
from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.lifecycle.promotion import promote_stm
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.constants import SEED_POLICY
from tests.lib.lifecycle.test_corpus_merge import at_cosine, topic
from tests.lib.store_procs import fork_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
BATCH = 3
MAX_KILLS = 40  # kill points per pass, spread over all its commit boundaries
VOLATILE = ("updated_at", "write_token")


def _vec(v: np.ndarray) -> list[float]:
    return [float(x) for x in v]


def seed_promotion(store: MemoryStore) -> None:
    rows = []
    for i in range(20):
        base = topic(500 + i)
        kind = i % 4
        recent = NOW - timedelta(minutes=5)
        if kind == 0:  # earned promotion; two by two alike, so a row promoted earlier in the run is no LTM duplicate
            base = topic(500 + i // 8 * 8)
            row = store.engine.new_row("a", f"We decided to deploy service {i} on Fridays", tier="stm", access_count=5,
                                last_accessed_at=recent, created_at=NOW - timedelta(hours=2))  # fmt: skip
        elif kind == 1:  # expired
            row = store.engine.new_row("a", f"scratch note {i}", tier="stm", created_at=NOW - timedelta(hours=30))
            row["expires_at"] = NOW - timedelta(hours=6)
        elif kind == 2:  # LTM already holds it: collapsed into that row
            ltm = store.engine.new_row("a", f"We decided to deploy service {i} on Fridays", tier="ltm")
            ltm["vector"] = _vec(base)
            rows.append(ltm)
            content = f"We decided to deploy service {i} on Fridays again"
            row = store.engine.new_row("a", content, tier="stm", access_count=5, last_accessed_at=recent,
                                created_at=NOW - timedelta(hours=2))  # fmt: skip
        else:  # stays short-term
            row = store.engine.new_row("a", f"the printer {i} is on floor two", tier="stm", access_count=1,
                                created_at=NOW - timedelta(hours=2))  # fmt: skip
        row["vector"] = _vec(base)
        rows.append(row)
    assert len(store.engine.insert_rows(rows)) == len(rows)


def seed_confidence(store: MemoryStore) -> None:
    rows = []
    for i in range(24):
        base = topic(700 + i // 3)  # groups of three look-alikes compete
        row = store.engine.new_row(
            "a", f"fact {i} about subject {i // 3}", created_at=NOW - timedelta(days=10 + 9 * i),
            confidence=0.35 + (i % 7) * 0.1, pinned=i % 8 == 5,
        )  # fmt: skip
        row["vector"] = _vec(at_cosine(base, 0.9, 800 + i))
        rows.append(row)
    assert len(store.engine.insert_rows(rows)) == len(rows)


def seed_contradictions(store: MemoryStore) -> None:
    rows = []
    for i, city in enumerate(("Berlin", "Paris", "Rome", "Oslo", "Madrid", "Vienna", "Prague")):
        base = topic(900 + i)
        for k, (where, days) in enumerate(((city, 20), ("Lima", 5))):
            row = store.engine.new_row("a", f"Project {i} is based in {where}", created_at=NOW - timedelta(days=days))
            row["vector"] = _vec(at_cosine(base, 0.9, 950 + 2 * i + k))
            rows.append(row)
        quiet = store.engine.new_row("a", f"Project {i} has a weekly review", created_at=NOW - timedelta(days=3))
        quiet["vector"] = _vec(at_cosine(base, 0.82, 990 + i))
        rows.append(quiet)
    assert len(store.engine.insert_rows(rows)) == len(rows)


def seed_archival(store: MemoryStore) -> None:
    rows = []
    for i in range(16):
        row = store.engine.new_row("a", f"faded fact {i}", confidence=0.1 + 0.05 * i, pinned=i % 5 == 2)
        row["vector"] = _vec(topic(1100 + i))
        rows.append(row)
    assert len(store.engine.insert_rows(rows)) == len(rows)


@dataclass(frozen=True)
class Case:
    command: str  # the store_procs worker command
    cursor: str  # the pass's cursor name
    seed: Callable[[MemoryStore], None]
    resume: Callable[..., Any]
    counts: tuple[str, ...]  # the report's counts
    expect: Callable[[dict[str, Any]], bool]  # the twin did every kind of write


CASES = {
    "promotion": Case(
        "promote", "stm_promotion", seed_promotion, promote_stm,
        ("processed", "promoted", "skipped", "expired", "skipped_concurrent_edit"),
        lambda r: r["promoted"] == 5 and r["expired"] == 5 and r["skipped"] == 5,
    ),
    "confidence": Case(
        "decay_confidence", "confidence_decay", seed_confidence, decay_confidence,
        ("decayed_count", "archived_count", "skipped_concurrent_edit", "processed"),
        lambda r: r["decayed_count"] > 0 and r["archived_count"] > 0,
    ),
    "contradictions": Case(
        "contradictions", "contradictions", seed_contradictions, detect_contradictions,
        ("candidates", "flagged", "superseded", "skipped_concurrent_edit"),
        lambda r: r["flagged"] == 7 and r["candidates"] > r["flagged"],
    ),
    "archival": Case(
        "archive", "archival", seed_archival, archive_faded,
        ("candidates", "archived", "skipped_concurrent_edit", "archived_ids"),
        lambda r: r["archived"] == 5 and len(r["archived_ids"]) == 5,
    ),
}  # fmt: skip


def run_in_child(case: Case, uri: str, kill_at: int, out: Path) -> tuple[int | None, dict[str, Any] | None]:
    env = {"ENGRAM_TEST_KILL_AT": str(kill_at), "ENGRAM_TEST_OUT": str(out)}
    proc = fork_worker(case.command, uri, "a", NOW.isoformat(), str(BATCH), env=env)
    proc.join(120)
    return proc.exitcode, json.loads(out.read_text()) if out.exists() else None


def _as_json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def snapshot(store: MemoryStore) -> dict[str, Any]:
    """Rows, links and audit events, without what differs between two runs (times of writing, run ids)."""
    rows = {r["id"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in store.engine.scan("a").to_pylist()}
    links = sorted(
        (r["src_id"], r["dst_id"], r["rel"], r["score"]) for r in store.engine.links_for_agent("a").to_pylist()
    )
    events = Counter((e["action"], e["memory_id"]) for e in store.engine.audit_for_agent("a").to_pylist())
    return {"rows": rows, "links": links, "events": events}


@pytest.mark.parametrize("name", list(CASES))
def test_a_resumed_pass_reports_the_whole_run(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **SEED_POLICY})  # as the workers open it
    base = str(tmp_path / "base")
    case.seed(MemoryStore.open(base, settings=settings))
    twin_uri = str(tmp_path / "twin")
    shutil.copytree(base, twin_uri)
    code, twin = run_in_child(case, twin_uri, -1, tmp_path / "twin.json")
    assert code == 0 and twin is not None
    assert case.expect(twin), twin
    twin_store = MemoryStore.open(twin_uri, settings=settings)
    expected, twin_totals = snapshot(twin_store), (twin_store.engine.get_cursor(case.cursor, "a") or {})["counts"]
    ticks = int(twin["ticks"])
    points = sorted({round(x) for x in np.linspace(1, ticks, min(MAX_KILLS, ticks))})

    for n, kill_at in enumerate(points):
        uri = str(tmp_path / f"k{n}")
        shutil.copytree(base, uri)
        code, _ = run_in_child(case, uri, kill_at, tmp_path / f"k{n}.json")
        assert code == -signal.SIGKILL, (kill_at, code)
        store = MemoryStore.open(uri, settings=settings)
        saved = store.engine.get_cursor(case.cursor, "a") or {}
        if saved.get("done"):  # killed after the run finished (giving back its lease): its cursor has the totals
            assert saved["counts"] == twin_totals, kill_at
        else:
            report = case.resume(store, "a", now=NOW, batch_size=BATCH)
            assert report.cursor["resumed"] >= (1 if saved else 0), kill_at
            got = {k: _as_json(getattr(report, k)) for k in case.counts}
            assert got == {k: twin[k] for k in case.counts}, kill_at
        assert snapshot(store) == expected, kill_at
        shutil.rmtree(uri)
