"""A corpus-merge apply SIGKILLed at any commit boundary resumes to exactly the state, links, audit events and
counts of an uninterrupted apply of the same plan (real child processes on a real LanceDB directory)."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import signal
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.lib.lifecycle.test_corpus_merge import THRESHOLDS, at_cosine, put, topic
from tests.lib.store_procs import fork_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NOW = datetime(2026, 2, 1, 9, tzinfo=UTC)
RUN = "corpus_merge_apply-test"
SUBJECTS = ("deploy", "backup", "report", "cache warmup", "index build", "log sync", "mail digest")
KILLS = 20
COUNTS = ("clusters", "merged", "skipped_concurrent_edit")


def planned_store(uri: str, settings: Settings) -> tuple[MemoryStore, str]:
    store = MemoryStore.open(uri, settings=settings.replace(**THRESHOLDS))
    for k, subject in enumerate(SUBJECTS):
        b = topic(100 + k)
        put(store, f"The {subject} runs every night", b, importance=0.8, tags=[f"t{k}"])
        put(store, f"{subject.capitalize()} runs every night", at_cosine(b, 0.92, 200 + k), importance=0.5)
        put(store, f"Every night the {subject} runs", at_cosine(b, 0.9, 300 + k), importance=0.4, tags=["x"])
    plan = consolidate_corpus(store, "a")
    assert (plan.clusters, plan.merged) == (len(SUBJECTS), 2 * len(SUBJECTS))
    assert plan.plan_id is not None
    return store, plan.plan_id


def snapshot(store: MemoryStore) -> dict[str, Any]:
    rows = {
        r["id"]: {k: v for k, v in r.items() if k not in ("updated_at", "write_token", "version")}
        for r in store.engine.scan("a").to_pylist()
    }
    links = sorted(
        (r["src_id"], r["dst_id"], r["rel"], r["score"], r["run_id"])
        for r in store.engine.links_for_agent("a").to_pylist()
    )
    audit = store.engine.audit_for_agent("a").to_pylist()
    events = Counter((e["action"], e["memory_id"], e["run_id"]) for e in audit)
    return {"rows": rows, "links": links, "events": events}


def apply_in_child(uri: str, plan_id: str, kill_at: int, out: Path) -> tuple[int | None, dict[str, Any] | None]:
    env = {"ENGRAM_TEST_KILL_AT": str(kill_at), "ENGRAM_TEST_OUT": str(out)}
    proc = fork_worker("apply", uri, "a", plan_id, NOW.isoformat(), "2", env=env)
    proc.join(60)
    return proc.exitcode, json.loads(out.read_text()) if out.exists() else None


def test_apply_killed_at_random_commit_boundaries_resumes_to_the_uninterrupted_state(
    tmp_path: Path, settings: Settings
) -> None:
    base_uri = str(tmp_path / "base")
    _, plan_id = planned_store(base_uri, settings)
    twin_uri = str(tmp_path / "twin")
    shutil.copytree(base_uri, twin_uri)
    # The uninterrupted twin, in a child that only counts its commit boundaries.
    code, twin_report = apply_in_child(twin_uri, plan_id, -1, tmp_path / "twin.json")
    assert code == 0 and twin_report is not None
    twin = MemoryStore.open(twin_uri, settings=settings)
    expected = snapshot(twin)
    assert twin_report["cursor"]["run_id"] != RUN  # the twin picked its own run id: normalise below
    assert (twin_report["clusters"], twin_report["merged"]) == (len(SUBJECTS), 2 * len(SUBJECTS))
    ticks = int(twin_report["ticks"])

    points = sorted(random.Random(14).sample(range(1, ticks + 1), min(KILLS, ticks)))
    for n, kill_at in enumerate(points):
        uri = str(tmp_path / f"k{n}")
        shutil.copytree(base_uri, uri)
        code, _ = apply_in_child(uri, plan_id, kill_at, tmp_path / f"k{n}.json")
        assert code == -signal.SIGKILL, (kill_at, code)
        store = MemoryStore.open(uri, settings=settings)
        report = dataclasses.asdict(apply_corpus_merge(store, "a", plan_id, now=NOW))
        if report["cursor"].get("already_applied"):  # killed after its last commit: the plan holds its report
            report = store.engine.get_plan(plan_id)["result"]  # type: ignore[index]
        got = snapshot(store)
        run_id = report["cursor"]["run_id"]
        assert {k: report[k] for k in COUNTS} == {k: twin_report[k] for k in COUNTS}, kill_at
        assert normalise(got, run_id) == normalise(expected, twin_report["cursor"]["run_id"]), kill_at
        assert store.engine.get_plan(plan_id)["status"] == "applied"  # type: ignore[index]
        assert apply_corpus_merge(store, "a", plan_id).merged == 0  # applied: nothing more
        shutil.rmtree(uri)


def normalise(snap: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The snapshot with this run's id replaced by a placeholder (each run has its own id)."""
    text = json.dumps(
        {
            "rows": snap["rows"],
            "links": snap["links"],
            "events": sorted((list(k), v) for k, v in snap["events"].items()),
        },
        sort_keys=True,
        default=str,
    )
    return json.loads(text.replace(run_id, "RUN"))
