"""The store compacts each shard's ``memories`` itself, so that steady single writes keep its fragment count bounded.

Every commit of the write path adds a fragment, and every read of the write path (the exact-duplicate lookup,
the nearest-neighbour search) visits each fragment the indexes do not cover, so without compaction the cost
of a write grows with the number of writes since the last maintenance run. After each write-path commit,
:func:`after_commit` counts; every :data:`CHECK_EVERY` commits it reads the fragment count and, past
:data:`MAX_FRAGMENTS`, starts one compaction in a background thread, giving way to writers as maintenance does
(:func:`engram_pipeline.store.maintenance.yielding`). One runs at a time per store; no write waits for it.

A compaction merges the small fragments and indexes their rows as one new delta segment of each index, through
``lance`` (lancedb 0.40 offers both only as one whole-table ``optimize``, which merges the new rows into each
BTree's last segment and so rewrites it: a cost that grew with the table, 126-182 ms at 100k rows against 44-63
at 10k for 32 new rows). Its cost is the rows written since the last one. The scalar indexes' segments are merged
(a rewrite) once one has :data:`MERGE_SCALAR_SEGMENTS`, every few hundred writes. Old versions are left for
maintenance to clean up.

A search visits every segment of the vector index; past :data:`MAX_SEGMENTS` the compaction rebuilds the index
as one, in the same background thread. That bound is looser than maintenance's
(:data:`~engram_pipeline.store.maintenance.MAX_VECTOR_SEGMENTS`): a rebuild costs about 30 s at 100k rows on 2
cores, so it should come every thousand-odd writes, not every few hundred.

**Giving way.** A lance step commits at its end and, when another commit took the version it meant to write,
rebases and tries again after a pause. Under a steady stream of single writes it can lose that race time after
time: in a trace of 300 writes at 100k rows (about one run in five) one ``optimize_indices`` retried its
commit for 2.6 s (its manifest written and its transaction file deleted, again and again) with its threads
nearly idle, and a single compaction outlasted every write, leaving 270-311 fragments. So a step still
running after :data:`STALL_S` closes the shard's gate: the write path's appends wait at it
(:func:`give_way`, at most :data:`GATE_S`) until the step returns, and the step's next try wins. A step that
is quick, as nearly all are (30-150 ms on a local disk), never closes it. Where the shard's steps are slower
by nature (object storage), the bound is :data:`STALL_TIMES` their recent median instead, so a step that is
merely slow does not hold the appends.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from lance.dataset import LanceDataset

if TYPE_CHECKING:
    from engram_pipeline.store.core import MemoryStore
    from engram_pipeline.store.shards import Shard

log = logging.getLogger(__name__)

MAX_FRAGMENTS = 32  # compact once ``memories`` has this many fragments
CHECK_EVERY = 8  # write-path commits between two reads of the fragment count
MAX_SEGMENTS = 32  # rebuild the vector index once it has this many segments
# Merge the scalar indexes' delta segments once one has this many (each compaction adds one per index)
MERGE_SCALAR_SEGMENTS = 8
STALL_S = 0.5  # a lance step still running after this long closes the shard's gate to the write path's appends
GATE_S = 1.0  # the longest an append waits at a closed gate
STALL_TIMES = 3.0  # ... or after this many times the median of the shard's recent steps, where that is longer


class _State:
    def __init__(self) -> None:
        self.commits = 0
        self.running: threading.Thread | None = None
        self.compactions = 0
        self.open = threading.Event()  # the gate (see the module): set while appends may go ahead
        self.open.set()
        self.closed = 0  # how many times a stalled step closed it
        self.steps: deque[float] = deque(maxlen=8)  # seconds taken by its recent steps that did not close it


# Per shard (each shard's ``memories`` table compacts on its own): keyed by the store's Shard object.
_states: weakref.WeakKeyDictionary[Shard, _State] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def after_commit(store: MemoryStore, shards: Iterable[int] = (0,)) -> None:
    """Count a write-path commit to each of ``shards``; start a background compaction of a shard's
    ``memories`` when its fragments pass the bound."""
    for k in shards:
        _after_commit(store.shards[k])


def _after_commit(shard: Shard) -> None:
    with _lock:
        state = _states.setdefault(shard, _State())
        state.commits += 1
        if state.commits % CHECK_EVERY or (state.running is not None and state.running.is_alive()):
            return
    if _fragments(shard.memories) < MAX_FRAGMENTS:
        return
    with _lock:
        if state.running is not None and state.running.is_alive():
            return
        state.running = threading.Thread(
            target=_compact, args=(shard.memories, state), name="engram-compact", daemon=True
        )
        state.running.start()


def give_way(shard: Shard) -> None:
    """Before an append to ``shard``'s ``memories``: wait while a stalled compaction step of it holds the gate
    closed (module doc), at most :data:`GATE_S`."""
    state = _states.get(shard)
    if state is not None and not state.open.is_set():
        state.open.wait(GATE_S)


def stall_after(state: _State) -> float:
    """How long a step of the shard may run before it closes the gate: :data:`STALL_S`, or
    :data:`STALL_TIMES` the median of its recent steps where that is longer."""
    return max(STALL_S, STALL_TIMES * statistics.median(state.steps)) if state.steps else STALL_S


def _giving_way(state: _State, step: Callable[[], Any]) -> Any:
    """Run ``step``; if it is still running after :func:`stall_after`, close the gate until it returns."""
    closed = threading.Event()

    def close() -> None:
        state.closed += 1
        closed.set()
        state.open.clear()

    timer = threading.Timer(stall_after(state), close)
    timer.daemon = True
    started = time.monotonic()
    timer.start()
    try:
        return step()
    finally:
        timer.cancel()
        state.open.set()
        if not closed.is_set():  # a stalled step's time is its lost races, not what a step costs here
            state.steps.append(time.monotonic() - started)


def fragments(store: MemoryStore) -> int:
    """The number of fragments of ``memories`` (of the shard that has the most)."""
    return max(_fragments(shard.memories) for shard in store.shards)


def _fragments(table: Any) -> int:
    return int(table.stats()["fragment_stats"]["num_fragments"])


def compactions(store: MemoryStore) -> int:
    """How many background compactions this process ran on ``store`` (over its shards)."""
    return sum(state.compactions for shard in store.shards if (state := _states.get(shard)) is not None)


def wait_idle(store: MemoryStore, timeout: float | None = None) -> None:
    """Wait for the running background compactions of ``store`` (tests and benchmarks)."""
    for shard in store.shards:
        state = _states.get(shard)
        thread = state.running if state is not None else None
        if thread is not None:
            thread.join(timeout)


def _compact(table: Any, state: _State) -> None:
    from engram_pipeline.store.maintenance import build_vector_index, optimize_table, yielding

    try:
        try:
            _, why = yielding(table, lambda: _compact_files(table, state), attempts=6)
        except Exception:  # lance's own steps failed: the whole-table optimize still compacts, at its cost
            log.exception("compaction through lance failed; optimizing the whole table instead")
            optimize_table(table)  # logs a compaction it left for later
            why = None
        if why is not None:
            log.info("background compaction of memories left for later: %s", why)
            return
        state.compactions += 1
        indexes = table.list_indices()
        scalar = [i.name for i in indexes if i.columns[0] != "vector"]
        if max((i.num_segments for i in indexes if i.name in scalar), default=0) >= MERGE_SCALAR_SEGMENTS:

            def merge() -> None:
                merging = {"num_indices_to_merge": MERGE_SCALAR_SEGMENTS, "index_names": scalar}
                table.to_lance().optimize.optimize_indices(**merging)

            yielding(table, lambda: _giving_way(state, merge), attempts=6)
        if any(idx.columns[0] == "vector" for idx in indexes):
            stats = table.index_stats("vector_idx")
            if stats is not None and stats.num_indices >= MAX_SEGMENTS:
                _, why = yielding(table, lambda: build_vector_index(table), attempts=6)
                if why is None:
                    optimize_table(table)  # now the fragments of the old segments can merge
    except Exception:  # a cost, never a correctness matter: the next commit's check tries again
        log.exception("background compaction of memories failed")


def _compact_files(table: Any, state: _State) -> None:
    """Merge the small fragments, then index their rows as a new delta segment of each index (module doc): 57-74 ms
    at 100k rows for 32 new rows, where ``optimize`` took 126-182. Each of the two steps gives way on its own."""
    dataset: LanceDataset = table.to_lance()
    _giving_way(state, dataset.optimize.compact_files)
    dataset = table.to_lance()  # the compacted version
    _giving_way(state, lambda: dataset.optimize.optimize_indices(num_indices_to_merge=0))
