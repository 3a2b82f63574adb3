"""Group commit: concurrent ``remember`` calls share a batch, and a batch decides as writes one after another
would: identical rows in one batch make one row, a near duplicate or a contradiction of a row earlier in the
same batch is seen, and every writer is told the row that stayed."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from lance.dataset import DatasetOptimizer, LanceDataset

from engram_pipeline.model import Memory, loads_metadata
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store import versions as version_rules
from engram_pipeline.store.errors import VersionConflict
from engram_pipeline.store.results import RememberResult
from engram_pipeline.store.write import batch as write_batch
from engram_pipeline.store.write import collapse as write_collapse
from engram_pipeline.store.write import compaction as sc
from engram_pipeline.store.write.commit import GroupCommit
from engram_pipeline.store.write.compaction import MAX_FRAGMENTS, compactions, fragments, wait_idle
from tests.vectors import DIM, THRESHOLDS, at_cosine, unit


def open_store(tmp_path: Path, settings: Settings) -> MemoryStore:
    return MemoryStore.open(str(tmp_path / "store"), settings=settings.replace(**THRESHOLDS))


def row(store: MemoryStore, content: str, vector: list[float], agent: str = "a") -> write_batch.Item:
    r = store.engine.new_row(agent, content)
    r["vector"] = vector
    return (r, "test")


def test_writes_arriving_during_a_commit_form_the_next_batch() -> None:
    release = threading.Event()
    seen: list[list[int]] = []

    def apply(items: object) -> list[int]:
        batch = list(items)  # type: ignore[call-overload]
        seen.append(batch)
        if len(seen) == 1:
            release.wait(30)
        return [x * 10 for x in batch]

    group: GroupCommit[int, int] = GroupCommit(apply)
    results: dict[int, int] = {}

    def submit(x: int) -> None:
        results[x] = group.submit(x)

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    while not seen:
        time.sleep(0.01)
    others = [threading.Thread(target=submit, args=(x,)) for x in range(1, 6)]
    for t in others:
        t.start()
    while len(group._queue) < 5:  # all five queued behind the leader's commit
        time.sleep(0.01)
    release.set()
    for t in [first, *others]:
        t.join(30)
    assert seen[0] == [0] and sorted(seen[1]) == [1, 2, 3, 4, 5] and len(seen) == 2
    assert results == {x: x * 10 for x in range(6)}
    assert group.stats.batches == 2 and group.stats.largest == 5


def test_many_writers_over_a_small_batch_bound_each_get_their_own_result() -> None:
    """Writers queued beyond ``max_batch`` wait for a later batch: each leader done hands the next batch to the
    first writer queued, one batch is applied at a time, and nobody is left waiting."""
    apply = _one_batch_at_a_time()
    group: GroupCommit[int, int] = GroupCommit(apply, max_batch=3)
    results: dict[int, int] = {}
    threads = [threading.Thread(target=lambda x=x: results.__setitem__(x, group.submit(x))) for x in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert results == {x: x * 10 for x in range(60)}
    assert group.stats.items == 60 and group.stats.largest <= 3 and not group._leading


def test_an_error_of_one_item_reaches_only_its_writer() -> None:
    group: GroupCommit[int, int] = GroupCommit(lambda items: [ValueError("odd") if x % 2 else x for x in items])
    assert group.submit(2) == 2
    try:
        group.submit(3)
    except ValueError as exc:
        assert str(exc) == "odd"
    else:
        raise AssertionError("the error was not raised")


def test_coroutine_writers_share_batches_led_off_the_event_loop() -> None:
    """Coroutines awaiting their writes hold no thread: a worker thread leads their batches (never the event
    loop's), writes arriving during a batch form the next one, and each coroutine gets its own result."""
    release = threading.Event()
    seen: list[tuple[list[int], int]] = []

    def apply(items: object) -> list[int]:
        seen.append((list(items), threading.get_ident()))  # type: ignore[call-overload]
        if len(seen) == 1:
            release.wait(30)
        return [x * 10 for x in items]  # type: ignore[attr-defined]

    group: GroupCommit[int, int] = GroupCommit(apply)

    async def main() -> tuple[list[int], int]:
        first = asyncio.ensure_future(group.submit_async(0))
        while not seen:
            await asyncio.sleep(0.01)
        rest = [asyncio.ensure_future(group.submit_async(x)) for x in range(1, 9)]
        while len(group._queue) < 8:
            await asyncio.sleep(0.01)
        release.set()
        return list(await asyncio.gather(first, *rest)), threading.get_ident()

    results, loop_thread = asyncio.run(main())
    assert results == [x * 10 for x in range(9)]
    assert [batch for batch, _ in seen] == [[0], list(range(1, 9))]
    assert all(thread != loop_thread for _, thread in seen)
    assert not group._leading


def test_thread_and_coroutine_writers_mixed_each_get_their_result_one_batch_at_a_time() -> None:
    apply = _one_batch_at_a_time()
    group: GroupCommit[int, int] = GroupCommit(apply, max_batch=4)
    results: dict[int, int] = {}
    threads = [threading.Thread(target=lambda x=x: results.__setitem__(x, group.submit(x))) for x in range(0, 80, 2)]

    async def coroutines() -> None:
        told = await asyncio.gather(*(group.submit_async(x) for x in range(1, 80, 2)))
        results.update(zip(range(1, 80, 2), told, strict=True))

    for t in threads:
        t.start()
    asyncio.run(coroutines())
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert results == {x: x * 10 for x in range(80)}
    assert group.stats.items == 80 and group.stats.largest <= 4 and not group._leading


def test_a_coroutine_hears_its_own_error_and_a_cancelled_one_leaves_the_others() -> None:
    release = threading.Event()
    applied: list[int] = []

    def apply(items: object) -> list[int | BaseException]:
        batch = list(items)  # type: ignore[call-overload]
        if batch == [0]:
            release.wait(30)
        applied.extend(batch)
        return [ValueError("odd") if x % 2 else x for x in batch]

    group: GroupCommit[int, int] = GroupCommit(apply)

    async def main() -> list[object]:
        first = asyncio.ensure_future(group.submit_async(0))
        while not group._leading:
            await asyncio.sleep(0.01)
        gone, odd, even = (asyncio.ensure_future(group.submit_async(x)) for x in (2, 3, 4))
        while len(group._queue) < 3:
            await asyncio.sleep(0.01)
        gone.cancel()
        release.set()
        return list(await asyncio.gather(first, odd, even, return_exceptions=True))

    first, odd, even = asyncio.run(main())
    assert first == 0 and even == 4
    assert isinstance(odd, ValueError) and str(odd) == "odd"
    assert sorted(applied) == [0, 2, 3, 4]  # the cancelled writer's item went in with its batch, unacknowledged
    assert not group._leading


def test_identical_rows_in_one_batch_make_one_row(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM)).tolist()
    items = [row(store, "The deploy key rotates monthly", base), row(store, "the DEPLOY key rotates  monthly", base)]
    first, second = write_batch.remember_batch(store.engine, items)
    assert not isinstance(first, BaseException) and not isinstance(second, BaseException)
    assert (first.outcome, second.outcome) == ("created", "exact_duplicate")
    assert second.memory["id"] == first.memory["id"]
    assert [r["id"] for r in store.list_memories("a")] == [first.memory["id"]]


def test_a_near_duplicate_of_an_earlier_row_of_the_batch_collapses_into_it(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    other = unit(np.random.default_rng(5).normal(size=DIM)).tolist()
    items = [
        row(store, "Deploys run every night at two", base.tolist()),
        row(store, "An unrelated fact about lunch", other),
        row(store, "Every night at two the deploy runs", at_cosine(base, 0.98)),
    ]
    results = write_batch.remember_batch(store.engine, items)
    assert not any(isinstance(r, BaseException) for r in results)
    a, b, c = results
    assert (a.outcome, b.outcome, c.outcome) == ("created", "created", "semantic_duplicate")  # type: ignore[union-attr]
    assert c.memory["id"] == a.memory["id"] and c.memory["reinforcement_count"] == 1  # type: ignore[union-attr]
    assert len(store.list_memories("a")) == 2


def test_a_contradiction_within_one_batch_is_flagged(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    old, new = write_batch.remember_batch(
        store.engine,
        [row(store, "User lives in Berlin", base.tolist()), row(store, "User lives in Munich", at_cosine(base, 0.9))],
    )
    assert not isinstance(old, BaseException) and not isinstance(new, BaseException)
    assert new.outcome == "created" and [c["memory_id"] for c in new.contradictions] == [old.memory["id"]]
    assert store.get(old.memory["id"], track_access=False)["status"] == "contradicted"


def test_a_batch_embeds_its_rows_in_one_call_and_a_refused_text_fails_its_write_only(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, settings)
    calls: list[list[str]] = []
    embed = store.engine.embed

    def refusing(texts: object) -> np.ndarray:
        texts = list(texts)  # type: ignore[call-overload]
        calls.append(texts)
        if any("refused" in t for t in texts):
            raise ValueError("the embedder refused a text")
        return embed(texts)

    monkeypatch.setattr(store.engine, "embed", refusing)
    given = unit(np.random.default_rng(3).normal(size=DIM)).tolist()
    items = [
        (store.engine.new_row("a", text), "test") for text in ("Deploys run at two", "A lunch fact", "Tea at four")
    ]
    items[2][0]["vector"] = given  # a given vector is not embedded
    first, second, third = write_batch.remember_batch(store.engine, items)
    assert calls == [["Deploys run at two", "A lunch fact"]]
    assert [r.outcome for r in (first, second, third)] == ["created"] * 3  # type: ignore[union-attr]
    assert np.allclose(third.memory["vector"], given)  # type: ignore[union-attr]

    calls.clear()
    items = [
        (store.engine.new_row("a", text), "test") for text in ("The build is green", "this is refused", "Cats nap")
    ]
    ok, refused, also = write_batch.remember_batch(store.engine, items)
    assert calls[0] == ["The build is green", "this is refused", "Cats nap"] and len(calls) == 4  # then one by one
    assert isinstance(refused, ValueError)
    assert not isinstance(ok, BaseException) and not isinstance(also, BaseException)
    assert {r["content"] for r in store.list_memories("a")} == {
        "Deploys run at two",
        "A lunch fact",
        "Tea at four",
        "The build is green",
        "Cats nap",
    }


def test_library_threads_racing_one_content_get_one_row(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    store.remember("a", "an earlier memory so the table exists")
    go = threading.Barrier(12)
    told: list[tuple[str, str]] = []

    def write(k: int) -> None:
        go.wait()
        for i in range(6):
            content = (
                f"shared fact {i}: the queue drains at {i} am"
                if k % 2
                else f"SHARED fact {i}:  the queue drains at {i} am"
            )
            r = store.remember("a", content)
            told.append((str(i), r.memory["id"]))

    threads = [threading.Thread(target=write, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    rows = store.engine.scan("a", columns=["id", "content"]).to_pylist()
    assert len(rows) == 7
    by_fact: dict[str, set[str]] = {}
    for fact, memory_id in told:
        by_fact.setdefault(fact, set()).add(memory_id)
    assert len(told) == 72 and all(len(ids) == 1 for ids in by_fact.values())
    assert {i for ids in by_fact.values() for i in ids} <= {r["id"] for r in rows}
    assert max(Counter(r["content"].casefold() for r in rows).values()) == 1


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


def test_a_collapse_reinforces_a_real_zero_confidence_from_zero(tmp_path: Path, settings: Settings) -> None:
    from engram_pipeline.scoring import reinforce

    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    first = store.remember("a", "Deploys run every night at two", vector=base.tolist(), confidence=0.0).memory
    again = store.remember("a", "Every night at two the deploy runs", vector=at_cosine(base, 0.98))
    assert again.outcome == "semantic_duplicate" and again.memory["id"] == first["id"]
    assert again.memory["confidence"] == pytest.approx(reinforce(0.0))  # was reinforce(0.5)


def test_near_duplicates_of_stored_rows_in_one_batch_collapse_in_one_commit(tmp_path: Path, settings: Settings) -> None:
    """A batch's collapses are one compare-and-set (one each serialised concurrent writers whose writes all
    collapsed), with the outcomes, scores and rows that the same writes one after another give."""
    store = open_store(tmp_path, settings)
    bases = [unit(np.random.default_rng(10 + k).normal(size=DIM)) for k in range(4)]
    stored = [
        store.remember("a", f"stored fact {k}: the queue drains at night", vector=b.tolist()).memory["id"]
        for k, b in enumerate(bases)
    ]
    shutil.copytree(tmp_path / "store", tmp_path / "copy")
    twin = MemoryStore.open(str(tmp_path / "copy"), settings=store.settings)
    items = [
        row(store, f"near duplicate {k}: at night the queue drains", at_cosine(b, 0.98, seed=k))
        for k, b in enumerate(bases)
    ]
    items.append(row(store, "near duplicate 0 again: the queue drains at night", at_cosine(bases[0], 0.985, seed=7)))
    # the content of item 1 again: nothing of it is stored, so it folds again, as a later write would
    items.append(row(store, "NEAR duplicate 1:  at night the queue drains", items[1][0]["vector"]))
    table = store.engine.shard_for("a").memories
    before = table.version
    batch = write_batch.remember_batch(store.engine, items)
    assert table.version == before + 1
    one_by_one = [write_batch.remember_batch(twin.engine, [copy.deepcopy(item)])[0] for item in items]
    assert told(batch) == told(one_by_one)
    assert [(outcome, memory_id) for outcome, memory_id, _ in told(batch)] == [
        ("semantic_duplicate", stored[k]) for k in (0, 1, 2, 3, 0, 1)
    ]
    assert folds(store) == folds(twin)
    assert [count for _, count, *_ in folds(store)] == [2 if i in stored[:2] else 1 for i in sorted(stored)]
    last = batch[4]  # the last write into row 0: told the row as its collapse left it
    assert isinstance(last, RememberResult) and last.memory == store.get(stored[0], track_access=False)


def told(results: list[RememberResult | BaseException]) -> list[tuple[str, str, float]]:
    """What each writer was told: outcome, row id, score (to 6 places, as a duplicate match records it: a
    multi-vector product and a single one round float32 differently)."""
    out = []
    for r in results:
        assert isinstance(r, RememberResult) and r.score is not None
        out.append((r.outcome, r.memory["id"], round(r.score, 6)))
    return out


def folds(store: MemoryStore) -> list[tuple[object, ...]]:
    """Per row of agent ``a`` (by id): what collapses change, and each duplicate match but its time."""
    out = []
    for r in sorted(store.list_memories("a"), key=lambda r: r["id"]):
        matches = [(m["match_id"], m["content"], m["score"]) for m in loads_metadata(r).get("duplicate_matches", [])]
        out.append((r["id"], r["reinforcement_count"], r["confidence"], r["tags"], matches))
    return out


def test_a_failed_collapse_reaches_only_the_writers_it_folds(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, settings)
    bases = [unit(np.random.default_rng(10 + k).normal(size=DIM)) for k in range(2)]
    for k, b in enumerate(bases):
        store.remember("a", f"stored fact {k}: the queue drains at night", vector=b.tolist())

    def boom(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(store.engine, "cas_write", boom)
    fresh = unit(np.random.default_rng(99).normal(size=DIM)).tolist()
    items = [
        row(store, "near duplicate 0: at night the queue drains", at_cosine(bases[0], 0.98)),
        row(store, "An unrelated fact about lunch", fresh),
        row(store, "near duplicate 1: at night the queue drains", at_cosine(bases[1], 0.98)),
    ]
    first, created, second = write_batch.remember_batch(store.engine, items)
    assert isinstance(first, RuntimeError) and isinstance(second, RuntimeError)
    assert not isinstance(created, BaseException) and created.outcome == "created"
    assert all(r["reinforcement_count"] == 0 for r in store.list_memories("a"))


def test_a_collapse_into_a_row_edited_since_its_check_folds_into_the_edit(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    stored = store.remember("a", "Deploys run every night at two", vector=base.tolist()).memory
    real, edited = store.engine.cas_write, []

    def edit_first(*args: object, **kwargs: object) -> object:
        if kwargs.get("action") == "dedup" and not edited:  # a concurrent edit lands between read and commit
            edited.append(store.update(stored["id"], expected_version=stored["version"], pinned=True))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store.engine, "cas_write", edit_first)
    (told,) = write_batch.remember_batch(
        store.engine, [row(store, "Every night at two the deploy runs", at_cosine(base, 0.98))]
    )
    assert not isinstance(told, BaseException) and told.outcome == "semantic_duplicate" and edited
    assert told.memory == store.get(stored["id"], track_access=False)
    assert told.memory["pinned"] and told.memory["reinforcement_count"] == 1  # the retry folded into the edit
    assert told.memory["version"] == stored["version"] + 2


def edited_while_folding(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch, *, edits: int
) -> tuple[MemoryStore, Memory, RememberResult | BaseException, int]:
    """A near-duplicate write of a stored row that another process edits right before each of the collapse's
    commits (before its compare-and-set and again after each re-read), ``edits`` times at most; what the
    writer was told, and how many edits landed."""
    store = open_store(tmp_path, settings)
    there = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    stored = store.remember("a", "Deploys run every night at two", vector=base.tolist()).memory
    real_cas, real_get, landed = store.engine.cas_write, store.engine.get_many, []

    def edit() -> None:
        if len(landed) < edits:
            now = there.get(stored["id"], track_access=False)
            landed.append(there.update(stored["id"], expected_version=now["version"], tags=[f"edit-{len(landed)}"]))

    def cas_write(*args: object, **kwargs: object) -> object:
        if kwargs.get("action") != "dedup":
            return real_cas(*args, **kwargs)  # type: ignore[arg-type]
        edit()
        monkeypatch.setattr(store.engine, "get_many", get_many)
        try:
            return real_cas(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            monkeypatch.setattr(store.engine, "get_many", real_get)

    def get_many(*args: object, **kwargs: object) -> object:
        found = real_get(*args, **kwargs)  # type: ignore[arg-type]
        edit()  # after the compare-and-set's re-read, before its retry
        return found

    monkeypatch.setattr(store.engine, "cas_write", cas_write)
    (told,) = write_batch.remember_batch(
        store.engine, [row(store, "Every night at two the deploy runs", at_cosine(base, 0.98))]
    )
    return store, stored, told, len(landed)


def test_a_collapse_folds_into_a_row_edited_through_its_first_round(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, stored, told, landed = edited_while_folding(tmp_path, settings, monkeypatch, edits=2)
    assert landed == 2 and not isinstance(told, BaseException) and told.outcome == "semantic_duplicate"
    now = store.get(stored["id"], track_access=False)
    assert now["reinforcement_count"] == 1 and now["version"] == stored["version"] + 3  # two edits, one fold
    assert "edit-1" in now["tags"]


def test_a_collapse_into_a_row_edited_through_every_round_tells_its_writer(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not acknowledged as folded when it was not: the writer hears the conflict and may write again."""
    store, stored, told, landed = edited_while_folding(tmp_path, settings, monkeypatch, edits=100)
    assert landed == 2 * write_collapse.COLLAPSE_ROUNDS
    assert isinstance(told, VersionConflict) and told.memory_id == stored["id"]
    assert store.get(stored["id"], track_access=False)["reinforcement_count"] == 0


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


def _one_batch_at_a_time() -> Callable[[object], list[int]]:
    """An ``apply`` that multiplies each item by 10 after 2 ms, and fails if two batches are applied at once."""
    lock = threading.Lock()
    applying = [0]

    def apply(items: object) -> list[int]:
        with lock:
            applying[0] += 1
            assert applying[0] == 1, "two batches applied at once"
        time.sleep(0.002)
        with lock:
            applying[0] -= 1
        return [x * 10 for x in items]  # type: ignore[attr-defined]

    return apply


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


@pytest.mark.parametrize("when", ["before its read", "before its fold"])
def test_a_write_whose_fold_target_is_deleted_mid_batch_is_written_as_new(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Issue 35: the writer was told its memory does not exist (HTTP 404) and nothing was stored."""
    store = open_store(tmp_path, settings)
    there = open_store(tmp_path, settings)  # another process's handle, which deletes the row
    base = unit(np.random.default_rng(0).normal(size=DIM))
    stored = store.remember("a", "Deploys run every night at two", vector=base.tolist()).memory
    deleted: list[str] = []

    def delete_once() -> None:
        if not deleted:
            there.delete(stored["id"])
            deleted.append(stored["id"])

    if when == "before its read":  # between the batch's checks and the read of the rows it folds into
        real_read = write_collapse.rows_by_id

        def rows_by_id(*args: object, **kwargs: object) -> object:
            delete_once()
            return real_read(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(write_collapse, "rows_by_id", rows_by_id)
    else:  # between that read and the fold's compare-and-set
        real_cas = store.engine.cas_write

        def cas_write(*args: object, **kwargs: object) -> object:
            if kwargs.get("action") == "dedup":
                delete_once()
            return real_cas(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store.engine, "cas_write", cas_write)
    other = unit(np.random.default_rng(1).normal(size=DIM)).tolist()
    items = [
        row(store, "The VPN profile expires in June", other),
        row(store, "Every night at two the deploy runs", at_cosine(base, 0.98)),
    ]
    first, told = write_batch.remember_batch(store.engine, items)
    assert deleted == [stored["id"]]
    assert not isinstance(first, BaseException) and first.outcome == "created"
    assert not isinstance(told, BaseException), told  # was MemoryNotFound
    assert told.outcome == "created" and told.memory["id"] == items[1][0]["id"]
    assert sorted(r["content"] for r in store.list_memories("a")) == [
        "Every night at two the deploy runs",
        "The VPN profile expires in June",
    ]
