"""One run at a time per (pass, agent): two real processes racing the same decay audit and count each prune
once; a lease left by a killed process is taken over; a run that raised does not block the next one."""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram_pipeline.lifecycle import _lease
from engram_pipeline.lifecycle._common import PassBusy, PassCursor
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.constants import SEED_POLICY
from tests.lib.store_procs import fork_worker, run_all, spawn

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
pytestmark = pytest.mark.integration


@pytest.fixture
def settings() -> Settings:
    """Pruning by score and age is the `seed` retention policy's; the worker processes use it too."""
    return Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **SEED_POLICY})


def _seed(store: MemoryStore, n: int) -> None:
    rows = []
    for i in range(n):
        content = f"forgotten note number {i} about item {i * 7}"
        row = store.engine.new_row("a", content, tier="ltm", created_at=NOW - timedelta(days=120 + i))
        row["vector"] = store.engine.embed([content])[0].tolist()
        rows.append(row)
    assert len(store.engine.insert_rows(rows)) == n


def test_two_concurrent_decay_runs_prune_and_audit_each_row_once(
    store: MemoryStore, store_uri: str, tmp_path: Path
) -> None:
    _seed(store, 40)
    go = tmp_path / "go"
    env = {"ENGRAM_TEST_GO": str(go)}
    procs = [spawn("decay", store_uri, "a", NOW.isoformat(), "4", env=env) for _ in range(2)]
    for p in procs:  # both have opened the store before either starts
        assert p.stdout is not None and "ready" in p.stdout.readline()
    go.touch()
    results = run_all(procs)
    assert all(code == 0 for code, _, _ in results), [err[-2000:] for _, _, err in results]
    reports = [r for _, r, _ in results]
    events = store.engine.audit_for_agent("a", actions=["prune"])
    assert store.engine.scan("a").num_rows == 0
    assert events.num_rows == 40  # before the lease: 80, one per run
    assert sum(r["pruned"] for r in reports) == 40
    # the second run waited for the first, then found nothing left to prune
    assert sorted(r["pruned"] for r in reports) == [0, 40]
    assert max(r["cursor"]["lease_waited_s"] for r in reports) > 0


def test_a_killed_holder_is_taken_over(store: MemoryStore, store_uri: str, tmp_path: Path) -> None:
    _seed(store, 12)
    victim = spawn("decay", store_uri, "a", NOW.isoformat(), "2", env={"ENGRAM_TEST_KILL_AT": "9"})
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    holder = store.engine.lease_holder("ltm_decay/a")
    assert holder is not None and json.loads(holder)["pid"] == victim.pid  # the dead process still holds it
    cursor = PassCursor.start(store, "ltm_decay", "a")
    assert cursor.lease is not None and cursor.lease.taken_over is not None
    assert cursor.lease.taken_over["pid"] == victim.pid and cursor.state["resumed"] == 1
    summary = cursor.finish()
    assert summary["lease_taken_over"]["pid"] == victim.pid
    assert store.engine.lease_holder("ltm_decay/a") is None


def test_a_live_holder_makes_the_second_run_wait_then_fail_clearly(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a holder in another (live) process: this test's parent process stands in for it
    live = {"token": "x", "host": socket.gethostname(), "pid": os.getppid(), "thread": 1,
            "pid_started": _lease._process_started(os.getppid()),
            "expires_at": (datetime.now(UTC) + timedelta(minutes=5)).isoformat()}  # fmt: skip
    store.engine.lease_holder("ltm_decay/a")
    assert store.engine.swap_lease("ltm_decay/a", None, json.dumps(live, sort_keys=True))
    monkeypatch.setattr(_lease, "LEASE_WAIT", timedelta(seconds=0.3))
    with pytest.raises(PassBusy, match="running elsewhere"):
        PassCursor.start(store, "ltm_decay", "a")
    assert store.engine.get_cursor("ltm_decay", "a") is None  # nothing started


def test_a_run_that_raised_does_not_block_the_next(store_uri: str, settings: Settings) -> None:
    store = MemoryStore.open(store_uri, settings=settings)
    _seed(store, 4)

    def failing() -> None:
        cursor = PassCursor.start(store, "ltm_decay", "a", now=NOW)
        cursor.advance("0")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing()
    gc.collect()  # the cursor is garbage: its heartbeat gives the lease back
    other = MemoryStore.open(store_uri, settings=settings)
    deadline = time.monotonic() + 10
    while other.engine.lease_holder("ltm_decay/a") is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert other.engine.lease_holder("ltm_decay/a") is None
    again = PassCursor.start(store, "ltm_decay", "a")
    assert again.state["resumed"] == 1 and again.after == "0"
    again.finish()


def test_a_long_batch_keeps_its_lease_past_the_ttl(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lease, "LEASE_TTL", timedelta(seconds=0.4))
    monkeypatch.setattr(_lease, "LEASE_WAIT", timedelta(seconds=0.3))
    cursor = PassCursor.start(store, "ltm_decay", "a", now=NOW)
    time.sleep(1.2)  # three TTLs without an advance: the heartbeat renewed it
    errors: list[BaseException] = []

    def second() -> None:
        try:
            PassCursor.start(store, "ltm_decay", "a")
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=second)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], PassBusy)
    cursor.advance("x")  # still ours
    cursor.finish()
    t = threading.Thread(target=second)
    t.start()
    t.join()
    assert len(errors) == 1  # free now: the second thread got it


def test_racing_deletes_of_the_same_rows_claim_and_audit_each_once(
    store: MemoryStore, store_uri: str, tmp_path: Path
) -> None:
    """Two runs of different passes may still delete the same rows at once: each row is claimed, and its
    pre-image audited, by the one whose commit removed it (both used to count it and keep an event)."""
    _seed(store, 30)
    ids = store.engine.scan("a", columns=["id"])["id"].to_pylist()
    go = tmp_path / "go"
    outs = [tmp_path / f"d{k}.json" for k in range(3)]
    procs = [
        fork_worker("delete", store_uri, f"run-{k}", *ids, env={"ENGRAM_TEST_GO": str(go), "ENGRAM_TEST_OUT": str(o)})
        for k, o in enumerate(outs)
    ]
    go.touch()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    applied = [i for o in outs for i in json.loads(o.read_text())["applied"]]
    assert sorted(applied) == sorted(ids)
    events = store.engine.audit_for_agent("a", actions=["prune"]).to_pylist()
    assert sorted(e["memory_id"] for e in events) == sorted(ids)


def test_a_run_that_raised_gives_the_lease_back_even_if_its_traceback_lives(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_lease, "LEASE_TTL", timedelta(seconds=0.4))
    kept: list[BaseException] = []

    def failing_pass() -> None:
        cursor = PassCursor.start(store, "ltm_decay", "a", now=NOW)
        raise RuntimeError(f"boom in {cursor.run_id}")

    try:
        failing_pass()
    except RuntimeError as exc:
        kept.append(exc)  # its traceback keeps the cursor alive, as an error report might
    assert store.engine.lease_holder("ltm_decay/a") is not None
    time.sleep(0.5)  # the heartbeat's next beat finds the pass gone
    assert store.engine.lease_holder("ltm_decay/a") is None
    assert kept[0].__traceback__ is not None


def test_a_held_twin_row_keeps_the_lease_taken(store: MemoryStore) -> None:
    """Two processes creating a lease's row at once can leave two rows of the key, and an update that raced the
    second insert leaves one held and one free. Taking the lease "from free" must see the held twin: it used to
    match the free row, and two runs held the lease at once (two concurrent decay runs split the prunes)."""
    from engram_pipeline.model import CURSOR_SCHEMA, rows_to_table, utcnow
    from engram_pipeline.store.cursors import LEASE_PREFIX

    key, other = "ltm_decay/a", json.dumps({"token": "x", "pid": os.getpid()})
    base = {"key": LEASE_PREFIX + key, "pass_name": LEASE_PREFIX, "agent_id": None, "updated_at": utcnow()}
    twins = rows_to_table([{**base, "cursor": other}, {**base, "cursor": None}], CURSOR_SCHEMA)
    store.engine.shard_for("a").cursors.table.add(twins)
    assert store.engine.lease_holder(key) == other
    assert not store.engine.swap_lease(key, None, "mine")
    assert store.engine.lease_holder(key) == other  # and the free twin was given back, not left as "mine"
    rows = store.engine.shard_for("a").cursors.table.search().where(f"key = '{LEASE_PREFIX}{key}'").to_arrow()
    assert sorted(rows["cursor"].to_pylist(), key=str) == sorted([other, None], key=str)
    assert store.engine.swap_lease(key, other, None)  # the holder gives it back: every row of the key is free
    assert store.engine.swap_lease(key, None, "mine") and store.engine.lease_holder(key) == "mine"
