"""A decay run killed part-way (a real process, SIGKILL) and run again ends where an uninterrupted run ends.

The run is ``dagster asset materialize --select importance_decay --partition <agent>`` in its own session, against
a temporary Dagster instance and store. Once its cursor shows committed batches, the whole session (the CLI and
the step worker it spawned) is killed. Running it again resumes from the cursor with the killed run's ``now``.
A twin store, copied before the first run, gets one uninterrupted pass at that same ``now``; the two stores must
hold the same rows, every row's version must have moved at most once, and every pruned row must have exactly one
audited prune event.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dagster_procs import BIN, ROOT, dagster_env, make_dagster_home, wait_for

from engram_pipeline.importer import import_jsonl
from engram_pipeline.lifecycle.decay import PASS_NAME, decay_importance
from engram_pipeline.model import utcnow
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.constants import SEED_POLICY

AGENT = "agent-x"
ROWS = 3000
BATCH = 25  # 120 batches: the run lasts long enough to be killed in the middle
# Columns every write touches with the wall clock or a random token: not part of the end state being compared.
VOLATILE = {"updated_at", "write_token"}


def seed_lines(now: datetime, n: int) -> list[dict[str, Any]]:
    """Rows that decay will touch in every way: re-scored, made stale, pruned, or kept by a pin."""
    lines = []
    for i in range(n):
        age = (i * 7) % 120  # days
        lines.append(
            {
                "agent_id": AGENT,
                "id": f"m{i:05d}",
                "content": f"Note {i}: the user mentioned topic {i % 97} while working on item {i}.",
                "tier": "ltm",
                "created_at": (now - timedelta(days=age)).isoformat(),
                "last_accessed_at": (now - timedelta(days=age / 2)).isoformat() if i % 3 == 0 else None,
                "access_count": i % 5,
                "pinned": i % 50 == 0,
                "importance": 0.5,
            }
        )
    return lines


def end_state(store: MemoryStore) -> dict[str, dict[str, Any]]:
    rows = store.engine.scan(AGENT).to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}


def prune_events(store: MemoryStore) -> dict[str, int]:
    events = store.engine.audit_for_agent(AGENT, actions=["prune"]).to_pylist()
    counts: dict[str, int] = {}
    for e in events:
        counts[e["memory_id"]] = counts.get(e["memory_id"], 0) + 1
    return counts


def launch(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    argv = [
        str(BIN / "dagster"),
        "asset",
        "materialize",
        "--select",
        "importance_decay",
        "--partition",
        AGENT,
        "-m",
        "assets.definitions",
    ]
    # Its own session, so the kill reaches the step worker the run spawns, as a machine failure would.
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.integration
@pytest.mark.slow
def test_killed_decay_run_resumes_to_the_uninterrupted_end_state(tmp_path: Path) -> None:
    uri = str(tmp_path / "store" / "lancedb")
    # pruning by score and age is the `seed` retention policy's (the default prunes only what is held elsewhere)
    extra = {"MEMORY_DECAY_BATCH_SIZE": str(BATCH), **SEED_POLICY}
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **extra})
    store = MemoryStore.open(uri, settings=settings)
    report = import_jsonl(store, seed_lines(utcnow(), ROWS), checks="exact")  # every row as decay will find it
    assert report.created == ROWS
    before = {r["id"]: r["version"] for r in store.engine.scan(AGENT, columns=["id", "version"]).to_pylist()}
    twin_uri = str(tmp_path / "twin")
    shutil.copytree(uri, twin_uri)

    home = make_dagster_home(tmp_path / "dagster")
    env = dagster_env(home, store_uri=uri, extra=extra)
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("agents", [AGENT])

    log = tmp_path / "materialize.log"
    proc = launch(env, log)
    try:

        def batches_committed() -> int:
            if proc.poll() is not None:
                raise AssertionError(f"the run ended before it was killed:\n{log.read_text()[-3000:]}")
            cursor = store.engine.get_cursor(PASS_NAME, AGENT) or {}
            return int(cursor.get("batches", 0)) if not cursor.get("done") else 0

        wait_for(lambda: batches_committed() >= 3, timeout=300, interval=0.05, what="three committed batches")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.5)  # let the killed worker's session die before reading its leftovers

    killed = store.engine.get_cursor(PASS_NAME, AGENT)
    assert killed is not None and not killed["done"], "the kill must land before the pass finished"
    assert 0 < killed["batches"] < ROWS // BATCH
    now = datetime.fromisoformat(killed["now"])
    print(f"killed after {killed['batches']} of {ROWS // BATCH} batches (after id {killed['after']})", file=sys.stderr)

    second = subprocess.run(
        [
            str(BIN / "dagster"),
            "asset",
            "materialize",
            "--select",
            "importance_decay",
            "--partition",
            AGENT,
            "-m",
            "assets.definitions",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    resumed = store.engine.get_cursor(PASS_NAME, AGENT)
    assert resumed is not None and resumed["done"]
    assert resumed["resumed"] == 1 and resumed["now"] == killed["now"] and resumed["run_id"] == killed["run_id"]

    twin = MemoryStore.open(twin_uri, settings=settings)
    reference = decay_importance(twin, AGENT, now=now)
    assert reference.pruned > 0 and reference.updated > 0 and reference.stale > 0

    got, want = end_state(store), end_state(twin)
    assert got.keys() == want.keys()
    differing = [i for i in want if got[i] != want[i]]
    assert not differing, f"{len(differing)} rows differ from the uninterrupted run, e.g. {differing[:3]}"
    # Nothing applied twice: each surviving row moved at most one version, exactly as in the twin.
    steps = {i: got[i]["version"] - before[i] for i in got}
    assert set(steps.values()) <= {0, 1}
    assert sum(steps.values()) == reference.updated
    # Every pruned row is gone once, with exactly one audited pre-image; the twin pruned the same rows.
    pruned = set(before) - set(got)
    assert pruned == set(before) - set(want)
    events = prune_events(store)
    assert set(events) == pruned and set(events.values()) == {1}
    assert all(store.engine.last_pre_image(i) is not None for i in list(pruned)[:5])


def test_prune_audit_is_written_ahead_once_per_run(store: MemoryStore) -> None:
    """The pre-image is audited before the delete (a kill in between leaves an event, not a silent gap), and
    a resumed run repeating the prune with the same run id records it once; a prune that loses the race to an
    edit leaves no event behind."""
    a = store.remember(AGENT, "User once asked about Perl regex syntax.").memory
    b = store.remember(AGENT, "User tried the Atom editor in 2021.").memory
    store.engine.record_audit(  # what a killed attempt left: the write-ahead event, the row still there
        [
            {
                "event_id": _ahead(a["id"], a["version"]),
                "memory_id": a["id"],
                "agent_id": AGENT,
                "action": "prune",
                "before": a,
            }
        ],
        actor="ltm_decay",
        run_id="run-1",
    )
    store.update(b["id"], expected_version=b["version"], pinned=True)
    result = store.engine.cas_delete(
        {a["id"]: a["version"], b["id"]: b["version"]}, actor="ltm_decay", action="prune", run_id="run-1"
    )
    assert result.applied == (a["id"],) and result.skipped_concurrent_edit == (b["id"],)
    assert prune_events(store) == {a["id"]: 1}
    assert store.restore(a["id"])["id"] == a["id"]


def _ahead(memory_id: str, version: int) -> str:
    from engram_pipeline.store.cas import _event_id

    return _event_id("run-1", "prune", memory_id, version)
