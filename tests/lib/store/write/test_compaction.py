"""The store compacts ``memories`` itself behind the writes (``store/write/compaction.py``): steady writes keep
the fragment count bounded, the compaction's commits meet no append of this process, new rows are indexed as
delta segments, old versions are cleaned up, and a script ending mid-compaction exits cleanly."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from lance.dataset import DatasetOptimizer, LanceDataset

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store import versions as version_rules
from engram_pipeline.store.write import batch as write_batch
from engram_pipeline.store.write import compaction as sc
from engram_pipeline.store.write.compaction import MAX_FRAGMENTS, compactions, fragments, wait_idle
from tests.lib.store.write.batches import open_store, row
from tests.vectors import DIM, at_cosine, unit


def test_steady_single_writes_keep_the_fragment_count_bounded(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    for i in range(MAX_FRAGMENTS + 40):
        # a made-up word per fact: "fact number 3" / "fact number 13" would be a quantity contradiction, and
        # the flag's update rewrites fragments, which is not the steady append this test is about
        word = hashlib.sha1(str(i).encode()).hexdigest()[:10]
        store.remember("a", f"distinct fact {word} about the queue")
        wait_idle(store.engine, 60)  # in service the compaction runs beside the writes; here each one finishes
    assert compactions(store.engine) >= 1
    assert fragments(store.engine) < MAX_FRAGMENTS
    assert len(store.list_memories("a")) == MAX_FRAGMENTS + 40


_EXIT_WITH_A_COMPACTION_RUNNING = """
import hashlib, sys, threading
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.write import compaction as sc
started, compact = threading.Event(), sc._compact
def slow(*args):  # the compaction is certainly still running when the script ends
    started.set()
    threading.Event().wait(1.0)
    compact(*args)
sc._compact = slow
store = MemoryStore.open(sys.argv[1], settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
i = 0
while not started.is_set():
    store.remember("a", f"distinct fact {hashlib.sha1(str(i).encode()).hexdigest()[:10]} about the queue")
    i += 1
print(i)
"""


def test_a_script_ending_while_a_compaction_runs_waits_for_it_and_exits_cleanly(tmp_path: Path) -> None:
    """The interpreter waits for the running compaction at exit: without that, the daemon thread was cut off
    (and one still inside lance aborted the process, exit status 134)."""
    uri = str(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WITH_A_COMPACTION_RUNNING, uri], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    store = MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    assert fragments(store.engine) < MAX_FRAGMENTS  # the compaction ran to its end
    assert len(store.list_memories("a")) == int(done.stdout)


def test_the_compactions_commits_meet_no_append_of_this_process(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background compaction commits its merge and its index steps with the shard's appends held back:
    however many writers append meanwhile, none is inside an append while one of those commits runs (they
    used to race, and a step could lose its commit to the appends for seconds on end)."""
    monkeypatch.setattr(sc, "MAX_FRAGMENTS", 4)
    monkeypatch.setattr(sc, "CHECK_EVERY", 1)
    monkeypatch.setattr(sc, "MERGE_SCALAR_SEGMENTS", 2)
    monkeypatch.setattr(sc, "INDEX_ROWS", 8)
    store = open_store(tmp_path, settings)
    store.remember("a", "the first fact, which makes the table")
    store.maintain()  # the scalar indexes, whose delta segments the compactions add and merge
    lock = threading.Lock()
    appending, overlaps, commits = [0], [], Counter[str]()
    insert = LanceDataset.insert

    def counted_insert(self: LanceDataset, data: object, **kwargs: object) -> None:  # the appends' commit
        with lock:
            appending[0] += 1
        try:
            insert(self, data, **kwargs)  # type: ignore[arg-type]
        finally:
            with lock:
                appending[0] -= 1

    def watched(name: str, step: Callable[..., object]) -> Callable[..., object]:
        def run(*args: object, **kwargs: object) -> object:
            with lock:
                commits[name] += 1
                if appending[0]:
                    overlaps.append(name)
            return step(*args, **kwargs)

        return run

    monkeypatch.setattr(LanceDataset, "insert", counted_insert)
    compaction = sc.Compaction
    monkeypatch.setattr(
        sc, "Compaction", type("Watched", (), {"plan": compaction.plan, "commit": watched("merge", compaction.commit)})
    )
    optimize = DatasetOptimizer.optimize_indices
    monkeypatch.setattr(DatasetOptimizer, "optimize_indices", watched("index", optimize))
    go = threading.Barrier(6)

    def write(k: int) -> None:
        go.wait()
        for i in range(40):
            store.remember("a", f"fact {i} of writer {k}: {hashlib.sha1(f'{k}/{i}'.encode()).hexdigest()[:12]}")

    writers = [threading.Thread(target=write, args=(k,)) for k in range(6)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(120)
    wait_idle(store.engine, 60)
    assert commits["merge"] >= 3 and commits["index"] >= 3
    assert not overlaps
    assert store.count("a") == 241 and fragments(store.engine) < 4 + 8


def test_old_versions_are_cleaned_up_as_writes_go_on(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every CLEAN_EVERY write-path commits the background thread removes the versions of ``memories`` but the
    last KEEP_VERSIONS (and those younger than VERSIONS_MIN_AGE), so their number stays bounded; a resumed
    pass whose version is gone decides from the rows as they are."""
    monkeypatch.setattr(version_rules, "CLEAN_EVERY", 16)
    monkeypatch.setattr(sc, "CHECK_EVERY", 4)
    monkeypatch.setattr(version_rules, "KEEP_VERSIONS", 8)
    monkeypatch.setattr(version_rules, "VERSIONS_MIN_AGE", timedelta(0))
    store = open_store(tmp_path, settings)
    first = store.remember("a", "the first fact").memory
    early = store.engine.memories.version
    for i in range(80):
        store.remember("a", f"fact number {i} about the release train")
        wait_idle(store.engine, 60)
    state = sc._states[store.engine.shards[0]]
    assert state.cleanups >= 4
    versions = [int(v["version"]) for v in store.engine.memories.list_versions()]
    assert len(versions) <= 8 + 16 and early not in versions
    with pytest.raises(Exception, match="(?i)not found|version"):
        store.engine.scan("a", version=early)
    assert store.get(first["id"], track_access=False)["content"] == "the first fact"
    assert store.count("a") == 81


def test_the_compaction_indexes_new_rows_as_delta_segments_and_merges_them(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each background compaction leaves every row indexed at the cost of the new rows (a delta segment per
    index); the scalar indexes' segments are merged once one has MERGE_SCALAR_SEGMENTS, and look-ups through
    them find every row."""
    monkeypatch.setattr(sc, "MAX_FRAGMENTS", 4)
    monkeypatch.setattr(sc, "CHECK_EVERY", 1)
    monkeypatch.setattr(sc, "MERGE_SCALAR_SEGMENTS", 3)
    monkeypatch.setattr(sc, "INDEX_ROWS", 1)
    store = open_store(tmp_path, settings)
    facts, ids, segments = _write_one_by_one(
        store, "queue", 40, lambda: max(i.num_segments for i in store.engine.memories.list_indices())
    )
    assert compactions(store.engine) >= 8
    # a compaction that brings an index to 3 segments merges them: each grew to 2, then went back to 1, again and again
    assert max(segments) == 2 and segments[-10:].count(1) >= 3
    indexes = {i.name: i for i in store.engine.memories.list_indices()}
    assert {"agent_id_idx", "id_idx", "content_hash_idx"} <= indexes.keys()
    assert all(i.num_unindexed_rows < 4 for i in indexes.values())  # only the rows since the last compaction
    assert [store.get(i, track_access=False)["content"] for i in ids] == facts
    assert all(store.remember("a", fact).outcome == "exact_duplicate" for fact in facts)
    assert store.engine.memories.count_rows() == len(facts)


def test_rows_are_indexed_only_past_index_rows_and_found_before(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compactions merge the new rows' fragments but index them only once INDEX_ROWS of them are not
    covered (an index step holds the appends back); until then look-ups scan them and find them all."""
    monkeypatch.setattr(sc, "MAX_FRAGMENTS", 4)
    monkeypatch.setattr(sc, "CHECK_EVERY", 1)
    monkeypatch.setattr(sc, "INDEX_ROWS", 20)
    store = open_store(tmp_path, settings)
    facts, ids, unindexed = _write_one_by_one(
        store, "build", 30, lambda: store.engine.memories.index_stats("content_hash_idx").num_unindexed_rows
    )
    assert compactions(store.engine) >= 4 and fragments(store.engine) < 4 + 4
    assert max(unindexed) >= 19 and unindexed[-1] < unindexed[-12]  # grew to the bound, then were indexed
    assert [store.get(i, track_access=False)["content"] for i in ids] == facts
    assert all(store.remember("a", fact).outcome == "exact_duplicate" for fact in facts)


def test_steady_collapses_keep_the_fragment_count_bounded(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    n = MAX_FRAGMENTS + 40
    bases = [unit(np.random.default_rng(10 + k).normal(size=DIM)) for k in range(n)]
    stored = [row(store, f"stored fact {k}: the queue drains at night", b.tolist()) for k, b in enumerate(bases)]
    # one fragment
    assert all(not isinstance(r, BaseException) for r in write_batch.remember_batch(store.engine, stored))
    for k, b in enumerate(bases):  # a collapse moves its row to a fragment of its own; nothing else is written
        again = store.remember("a", f"near duplicate {k}: at night the queue drains", vector=at_cosine(b, 0.98, seed=k))
        assert again.outcome == "semantic_duplicate"
        wait_idle(store.engine, 60)
    assert compactions(store.engine) >= 1
    assert fragments(store.engine) < MAX_FRAGMENTS


def _write_one_by_one(
    store: MemoryStore, topic: str, n: int, measure: Callable[[], int]
) -> tuple[list[str], list[str], list[int]]:
    """``n`` distinct facts about ``topic`` written to agent ``a``: the first, then the scalar indexes built,
    then the rest one by one, each after the compaction the one before started. Returns the facts, their ids
    and ``measure()`` after each write but the first."""
    facts = [f"distinct fact {hashlib.sha1(str(i).encode()).hexdigest()[:10]} about the {topic}" for i in range(n)]
    ids = [store.remember("a", facts[0]).memory["id"]]
    store.maintain()  # the scalar indexes
    measured: list[int] = []
    for fact in facts[1:]:
        ids.append(store.remember("a", fact).memory["id"])
        wait_idle(store.engine, 60)
        measured.append(measure())
    return facts, ids, measured
