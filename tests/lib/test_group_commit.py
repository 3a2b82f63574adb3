"""Group commit: concurrent ``remember`` calls share a batch, and a batch decides as writes one after another
would: identical rows in one batch make one row, a near duplicate or a contradiction of a row earlier in the
same batch is seen, and every writer is told the row that stayed."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store import write_path as wp
from engram_pipeline.store.group_commit import GroupCommit
from engram_pipeline.store.self_compaction import MAX_FRAGMENTS, compactions, fragments, wait_idle

THRESHOLDS = dict(
    duplicate_threshold=0.97, merge_threshold=0.85, contradiction_threshold=0.8, contradiction_threshold_max=0.97
)
DIM = 384


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def at_cosine(base: np.ndarray, cosine: float, seed: int = 1) -> list[float]:
    w = np.random.default_rng(seed).normal(size=base.shape)
    w = unit(w - (w @ base) * base)
    return [float(x) for x in unit(cosine * base + np.sqrt(1 - cosine**2) * w)]


def open_store(tmp_path: Path, settings: Settings) -> MemoryStore:
    return MemoryStore.open(str(tmp_path / "store"), settings=settings.replace(**THRESHOLDS))


def row(store: MemoryStore, content: str, vector: list[float], agent: str = "a") -> wp.Item:
    r = store.new_row(agent, content)
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


def test_an_error_of_one_item_reaches_only_its_writer() -> None:
    group: GroupCommit[int, int] = GroupCommit(lambda items: [ValueError("odd") if x % 2 else x for x in items])
    assert group.submit(2) == 2
    try:
        group.submit(3)
    except ValueError as exc:
        assert str(exc) == "odd"
    else:
        raise AssertionError("the error was not raised")


def test_identical_rows_in_one_batch_make_one_row(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM)).tolist()
    items = [row(store, "The deploy key rotates monthly", base), row(store, "the DEPLOY key rotates  monthly", base)]
    first, second = wp.remember_batch(store, items)
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
    results = wp.remember_batch(store, items)
    assert not any(isinstance(r, BaseException) for r in results)
    a, b, c = results
    assert (a.outcome, b.outcome, c.outcome) == ("created", "created", "semantic_duplicate")  # type: ignore[union-attr]
    assert c.memory["id"] == a.memory["id"] and c.memory["reinforcement_count"] == 1  # type: ignore[union-attr]
    assert len(store.list_memories("a")) == 2


def test_a_contradiction_within_one_batch_is_flagged(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    old, new = wp.remember_batch(
        store,
        [row(store, "User lives in Berlin", base.tolist()), row(store, "User lives in Munich", at_cosine(base, 0.9))],
    )
    assert not isinstance(old, BaseException) and not isinstance(new, BaseException)
    assert new.outcome == "created" and [c["memory_id"] for c in new.contradictions] == [old.memory["id"]]
    assert store.get(old.memory["id"], track_access=False)["status"] == "contradicted"


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
    rows = store.scan("a", columns=["id", "content"]).to_pylist()
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
        wait_idle(store, 60)  # in service the compaction runs beside the writes; here each one finishes
    assert compactions(store) >= 1
    assert fragments(store) < MAX_FRAGMENTS
    assert len(store.list_memories("a")) == MAX_FRAGMENTS + 40


def test_a_collapse_reinforces_a_real_zero_confidence_from_zero(tmp_path: Path, settings: Settings) -> None:
    from engram_pipeline.scoring import reinforce

    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    first = store.remember("a", "Deploys run every night at two", vector=base.tolist(), confidence=0.0).memory
    again = store.remember("a", "Every night at two the deploy runs", vector=at_cosine(base, 0.98))
    assert again.outcome == "semantic_duplicate" and again.memory["id"] == first["id"]
    assert again.memory["confidence"] == pytest.approx(reinforce(0.0))  # was reinforce(0.5)
