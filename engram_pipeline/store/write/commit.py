"""Group commit: the writers of one process share a LanceDB commit instead of queueing one commit each.

Every ``remember`` ends in a commit, and LanceDB serialises commits per table: sixteen API requests writing at
once used to make sixteen commits one after another (and sixteen fragments). Here each writer hands its item
to :meth:`GroupCommit.submit` and waits. If no batch is being applied, the writer becomes the *leader*: it
takes every item queued so far (its own included), applies them in one call and hands each waiting writer its
own result. Items that arrive while a leader works queue up and form the next batch. A lone writer therefore
waits for nothing (its batch is itself); under load a batch is everything that arrived during one commit,
which is the short window the issue asks for, sized by the commit itself rather than by a timer.

A coroutine writer (the HTTP API's) calls :meth:`GroupCommit.submit_async` instead: its item joins the queue
the same way and it awaits a future, holding no thread while it waits. It never leads itself (the event loop
must not block on a commit): when it finds no batch under way, a worker thread of the loop's executor leads,
and goes on leading while coroutine writers are first in the queue; a thread writer first in the queue is
handed the lead as above. Each API request used to hold a thread of the server's pool for its whole wait, and
be handed from the event loop to that thread and back (what that cost: ``docs/scale.md``, "How the write path
was measured").

A writer returns only once the batch holding its item has been applied, i.e. after the commit that holds its
row returned: an acknowledgement is never ahead of the data. A batch that raises fails every item in it (a
failure of one item alone is returned for that item by ``apply``). A coroutine cancelled while it waits
(its client went away) does not take its item back: the item is applied with its batch, unacknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# ``apply`` returns one entry per item, in order: the item's result, or the exception it alone raised.
Apply = Callable[[Sequence[T]], Sequence["R | BaseException"]]


@dataclass
class _Slot(Generic[T, R]):
    item: T
    done: bool = False
    result: R | None = None
    error: BaseException | None = None
    # set once: when the slot's batch was applied, or when its writer is to lead the next batch
    woken: threading.Event = field(default_factory=threading.Event)
    # an async writer's future, resolved on its loop once the batch was applied (it never leads)
    future: asyncio.Future[R] | None = None


@dataclass
class GroupStats:
    batches: int = 0  # calls of ``apply``
    items: int = 0  # items applied
    largest: int = 0  # the most items one batch held
    sizes: dict[int, int] = field(default_factory=dict)  # batch size -> how many batches had it


class GroupCommit(Generic[T, R]):
    """Batch concurrent ``submit`` calls into calls of ``apply`` (one leader at a time); see the module.

    >>> gc = GroupCommit(lambda items: [x * 2 for x in items])
    >>> gc.submit(21), gc.stats.batches
    (42, 1)
    """

    def __init__(self, apply: Apply[T, R], *, max_batch: int = 512) -> None:
        self._apply = apply
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Slot[T, R]] = []
        self._leading = False
        self.stats = GroupStats()

    def submit(self, item: T) -> R:
        """Apply ``item`` in the next batch and return its result (or raise its error).

        A waiting writer is woken once, by its own event: when its batch was applied, or when the leader
        that finished hands it the next batch (the first writer queued). One condition shared by every
        writer woke them all after each batch, most of them only to wait again."""
        slot: _Slot[T, R] = _Slot(item)
        with self._lock:
            self._queue.append(slot)
            leader = not self._leading
            self._leading = True
        if not leader:
            slot.woken.wait()
            leader = not slot.done  # not applied yet: handed the lead
        if leader:
            while not slot.done:  # a leader's item is first in the queue, so its first batch holds it
                with self._lock:
                    batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
                self._lead(batch)
            self._serve()
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    async def submit_async(self, item: T) -> R:
        """:meth:`submit` for a coroutine: ``item`` joins the next batch and the coroutine awaits its result
        (or error) without holding a thread; with no batch under way, a worker thread of the running loop's
        executor leads (see the module)."""
        loop = asyncio.get_running_loop()
        slot: _Slot[T, R] = _Slot(item, future=loop.create_future())
        with self._lock:
            self._queue.append(slot)
            leader = not self._leading
            self._leading = True
        if leader:
            loop.run_in_executor(None, self._serve)
        assert slot.future is not None
        return await slot.future

    def _serve(self) -> None:
        """Lead batches while coroutine writers are first in the queue; then hand the lead to the thread writer
        first in it, or give it up when the queue is empty."""
        following: _Slot[T, R] | None = None
        try:
            while True:
                with self._lock:
                    if not self._queue or self._queue[0].future is None:
                        following = self._queue[0] if self._queue else None
                        self._leading = following is not None
                        break
                    batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
                self._lead(batch)
        except BaseException:  # _lead hands every outcome on; should anything else fail, nobody is left waiting
            with self._lock:
                self._leading = False
            raise
        if following is not None:
            following.woken.set()

    def _lead(self, batch: list[_Slot[T, R]]) -> None:
        try:
            outcomes: Sequence[R | BaseException] = self._apply([s.item for s in batch])
            if len(outcomes) != len(batch):
                raise AssertionError(f"apply returned {len(outcomes)} results for {len(batch)} items")
        except BaseException as exc:  # the whole batch failed: every writer in it hears why
            outcomes = [exc] * len(batch)
        for s, out in zip(batch, outcomes, strict=True):
            if isinstance(out, BaseException):
                s.error = out
            else:
                s.result = out
            s.done = True
        with self._lock:
            st = self.stats
            st.batches += 1
            st.items += len(batch)
            st.largest = max(st.largest, len(batch))
            st.sizes[len(batch)] = st.sizes.get(len(batch), 0) + 1
        for s in batch:
            if s.future is None:
                s.woken.set()
                continue
            with contextlib.suppress(RuntimeError):  # its loop was closed meanwhile: nobody awaits the result
                s.future.get_loop().call_soon_threadsafe(_resolve, s)


def _resolve(slot: _Slot[Any, Any]) -> None:
    """Hand a coroutine writer its outcome, on its own loop (a future is not thread-safe)."""
    future = slot.future
    assert future is not None
    if future.cancelled():  # the writer went away; its item was applied all the same
        return
    if slot.error is not None:
        future.set_exception(slot.error)
    else:
        future.set_result(slot.result)
