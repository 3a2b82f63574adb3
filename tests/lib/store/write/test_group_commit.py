"""Group commit (``store/write/commit.py``): concurrent ``remember`` calls share a batch, one leader applies it
at a time, and every writer, thread or coroutine, is told its own result or error."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from engram_pipeline.settings import Settings
from engram_pipeline.store.write.commit import GroupCommit
from tests.lib.store.write.batches import open_store


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
