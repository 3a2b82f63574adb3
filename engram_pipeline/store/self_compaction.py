"""The store compacts each shard's ``memories`` itself, so that steady single writes keep its fragment count bounded.

Every commit of the write path adds a fragment, and every read of the write path (the exact-duplicate lookup,
the nearest-neighbour search) visits each fragment the indexes do not cover, so without compaction the cost
of a write grows with the number of writes since the last maintenance run. After each write-path commit,
:func:`after_commit` counts; every :data:`CHECK_EVERY` commits it reads the fragment count and, past
:data:`MAX_FRAGMENTS`, starts one compaction in a background thread: ``optimize`` (compaction plus the
incremental refresh of the scalar and vector indexes), giving way to writers as maintenance does
(:func:`engram_pipeline.store.maintenance.optimize_table`). One runs at a time per store; no write waits for
it.

Each refresh adds a segment to the vector index (lancedb 0.40 does not merge them), and a search visits every
segment; past :data:`MAX_SEGMENTS` the compaction rebuilds the index as one, in the same background thread.
That bound is looser than maintenance's (:data:`~engram_pipeline.store.maintenance.MAX_VECTOR_SEGMENTS`): a
rebuild costs about 30 s at 100k rows on 2 cores, so it should come every thousand-odd writes, not every few
hundred.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engram_pipeline.store.core import MemoryStore
    from engram_pipeline.store.shards import Shard

log = logging.getLogger(__name__)

MAX_FRAGMENTS = 32  # compact once ``memories`` has this many fragments
CHECK_EVERY = 8  # write-path commits between two reads of the fragment count
MAX_SEGMENTS = 32  # rebuild the vector index once it has this many segments


class _State:
    def __init__(self) -> None:
        self.commits = 0
        self.running: threading.Thread | None = None
        self.compactions = 0


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
        optimize_table(table)
        state.compactions += 1
        if any(idx.columns[0] == "vector" for idx in table.list_indices()):
            stats = table.index_stats("vector_idx")
            if stats is not None and stats.num_indices >= MAX_SEGMENTS:
                _, why = yielding(table, lambda: build_vector_index(table), attempts=6)
                if why is None:
                    optimize_table(table)  # now the fragments of the old segments can merge
    except Exception:  # a cost, never a correctness matter: the next commit's check tries again
        log.exception("background compaction of memories failed")
