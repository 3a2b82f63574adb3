"""A sweep raises the collector's threshold while it runs and puts back what was there, however it ends."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from engram_pipeline.lifecycle import sweep as sweep_module
from engram_pipeline.lifecycle._gc import SWEEP_GC_THRESHOLD, fewer_collections
from engram_pipeline.lifecycle.sweep import sweep


@pytest.fixture
def default_threshold() -> Iterator[tuple[int, int, int]]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*saved)


def test_a_sweep_runs_its_pass_under_the_raised_threshold_and_restores_it(store, monkeypatch, default_threshold):
    seen: list[tuple[int, int, int]] = []

    def spy(store, agents, *, now, run_id):  # noqa: ANN001, ANN202, ARG001
        seen.append(gc.get_threshold())
        return {agent: None for agent in agents}

    monkeypatch.setitem(sweep_module.COLUMNAR, "ltm_decay", spy)
    sweep(store, "ltm_decay", ["alice", "bob"])
    assert seen and all(t == (SWEEP_GC_THRESHOLD, 10, 10) for t in seen)
    assert gc.get_threshold() == default_threshold


def test_a_failing_pass_still_restores_the_threshold(store, monkeypatch, default_threshold):
    def boom(store, agents, *, now, run_id):  # noqa: ANN001, ANN202, ARG001
        raise RuntimeError("pass failed")

    monkeypatch.setitem(sweep_module.COLUMNAR, "ltm_decay", boom)
    with pytest.raises(RuntimeError, match="pass failed"):
        sweep(store, "ltm_decay", ["alice"])
    assert gc.get_threshold() == default_threshold


def test_overlapping_blocks_in_threads_restore_the_threshold_only_when_the_last_one_leaves(default_threshold):
    inside, leave = threading.Barrier(2), threading.Event()

    def hold() -> None:
        with fewer_collections():
            inside.wait()
            leave.wait()

    worker = threading.Thread(target=hold)
    worker.start()
    with fewer_collections():
        inside.wait()
    assert gc.get_threshold()[0] == SWEEP_GC_THRESHOLD  # the thread is still in its block
    leave.set()
    worker.join()
    assert gc.get_threshold() == default_threshold


def test_a_caller_who_turned_the_threshold_off_or_higher_keeps_it():
    saved = gc.get_threshold()
    try:
        for mine in ((0, 10, 10), (SWEEP_GC_THRESHOLD * 2, 10, 10)):
            gc.set_threshold(*mine)
            with fewer_collections():
                assert gc.get_threshold() == mine
            assert gc.get_threshold() == mine
    finally:
        gc.set_threshold(*saved)
