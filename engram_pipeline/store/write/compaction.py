"""The store compacts each shard's ``memories`` itself, so that steady single writes keep its fragment count bounded.

Every write-path commit adds a fragment, and the write path's reads visit each fragment the indexes do not
cover: without compaction a write's cost grows with the writes since the last maintenance run. Every
:data:`CHECK_EVERY` commits :func:`after_commit` reads the fragment count and, past :data:`MAX_FRAGMENTS`,
starts one compaction in a background thread (one per shard at a time; no write waits for it): the small
fragments merged and indexed as a new delta segment of each index through ``lance``, their commits made with
the shard's appends held back (:meth:`Appends.held_back`) so that a stream of writes cannot make them lose
their commit time after time. The same thread cleans up old versions (:mod:`engram_pipeline.store.versions`),
merges the scalar indexes' segments and rebuilds the vector index past :data:`MAX_SEGMENTS`; at exit the
interpreter waits for it. Why each step is as it is: ``docs/scale.md``, "How the store compacts itself".
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from lance.dataset import LanceDataset
from lance.optimize import Compaction

from engram_pipeline.store import versions
from engram_pipeline.store.appends import Appends

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine
    from engram_pipeline.store.shards import Shard

log = logging.getLogger(__name__)

MAX_FRAGMENTS = 32  # compact once ``memories`` has this many fragments
CHECK_EVERY = 8  # write-path commits between two reads of the fragment count
MAX_SEGMENTS = 32  # rebuild the vector index once it has this many segments
# Merge the scalar indexes' delta segments once one has this many (each compaction adds one per index)
MERGE_SCALAR_SEGMENTS = 8
# Index the rows written since the last index step once there are this many: each held-back index step is a
# write that waits for it (below it the rows are scanned: about 1,000 rows; docs/scale.md has the figures)
INDEX_ROWS = 1024
EXIT_WAIT_S = 300.0  # at interpreter exit, how long the running compactions are waited for, in all


class _State:
    def __init__(self) -> None:
        self.commits = 0
        self.cleaned_at = 0  # ``commits`` when the last clean-up of old versions was started
        self.running: threading.Thread | None = None
        self.compactions = 0
        self.cleanups = 0


# Per shard (each shard's ``memories`` table compacts on its own): keyed by the store's Shard object.
_states: weakref.WeakKeyDictionary[Shard, _State] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def after_commit(store: Engine, shards: Iterable[int] = (0,)) -> None:
    """Count a write-path commit to each of ``shards``; start a background compaction of a shard's
    ``memories`` when its fragments pass the bound, and a clean-up of its old versions every
    :data:`~engram_pipeline.store.versions.CLEAN_EVERY` commits (one background thread per shard at a time)."""
    for k in shards:
        _after_commit(store.shards[k])


def _after_commit(shard: Shard) -> None:
    with _lock:
        state = _states.setdefault(shard, _State())
        state.commits += 1
        if state.commits % CHECK_EVERY or (state.running is not None and state.running.is_alive()):
            return
        clean = state.commits - state.cleaned_at >= versions.CLEAN_EVERY
    compact = _fragments(shard.memories) >= MAX_FRAGMENTS
    if not (compact or clean):
        return
    with _lock:
        if state.running is not None and state.running.is_alive():
            return
        if clean:
            state.cleaned_at = state.commits
        state.running = threading.Thread(
            target=_maintain,
            args=(shard.memories, shard.appends, state, compact, clean),
            name="engram-compact",
            daemon=True,
        )
        state.running.start()


def fragments(store: Engine) -> int:
    """The number of fragments of ``memories`` (of the shard that has the most)."""
    return max(_fragments(shard.memories) for shard in store.shards)


def _fragments(table: Any) -> int:
    return int(table.stats()["fragment_stats"]["num_fragments"])


def compactions(store: Engine) -> int:
    """How many background compactions this process ran on ``store`` (over its shards)."""
    return sum(state.compactions for shard in store.shards if (state := _states.get(shard)) is not None)


def wait_idle(store: Engine, timeout: float | None = None) -> None:
    """Wait for the running background compactions of ``store`` (tests and benchmarks)."""
    for shard in store.shards:
        state = _states.get(shard)
        thread = state.running if state is not None else None
        if thread is not None:
            thread.join(timeout)


@atexit.register
def _wait_at_exit() -> None:
    """Let the running compactions return before the interpreter finalises (module doc, "At exit")."""
    deadline = time.monotonic() + EXIT_WAIT_S
    with _lock:
        running = [s.running for s in _states.values() if s.running is not None and s.running.is_alive()]
    if running:
        log.info("waiting for %d background compaction(s) to finish before exit", len(running))
    for thread in running:
        thread.join(max(0.0, deadline - time.monotonic()))


def _maintain(table: Any, appends: Appends, state: _State, compact: bool, clean: bool) -> None:
    """The background work on ``table``: a compaction (``compact``), then a clean-up of old versions
    (``clean``)."""
    try:
        if compact:
            _compact(table, appends, state)
    finally:
        if clean:
            _clean_versions(table, state)


def _clean_versions(table: Any, state: _State) -> None:
    if versions.clean_old_versions(table):
        state.cleanups += 1


def _compact(table: Any, appends: Appends, state: _State) -> None:
    from engram_pipeline.store.maintenance import build_vector_index, optimize_table, yielding

    try:
        try:
            _, why = yielding(table, lambda: _compact_files(table, appends), attempts=6)
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
                with appends.held_back(kinds=("CreateIndex",)):
                    table.to_lance().optimize.optimize_indices(**merging)

            yielding(table, merge, attempts=6)
        if any(idx.columns[0] == "vector" for idx in indexes):
            stats = table.index_stats("vector_idx")
            if stats is not None and stats.num_indices >= MAX_SEGMENTS:
                _, why = yielding(table, lambda: build_vector_index(table), attempts=6)
                if why is None:
                    optimize_table(table)  # now the fragments of the old segments can merge
    except Exception:  # a cost, never a correctness matter: the next commit's check tries again
        log.exception("background compaction of memories failed")


def _compact_files(table: Any, appends: Appends) -> None:
    """Merge the small fragments, committing with the shard's appends held back; then, once the table has
    :data:`INDEX_ROWS` rows the indexes do not cover, index them as a new delta segment of each index, with the
    appends held back too (module doc)."""
    dataset: LanceDataset = table.to_lance()
    plan = Compaction.plan(dataset, {})
    rewrites = [task.execute(dataset) for task in plan.tasks]
    if rewrites:
        with appends.held_back(kinds=("ReserveFragments", "Rewrite")):
            Compaction.commit(dataset, rewrites)
    if _unindexed(table) >= INDEX_ROWS:
        with appends.held_back(kinds=("CreateIndex",)):
            table.to_lance().optimize.optimize_indices(num_indices_to_merge=0)


def _unindexed(table: Any) -> int:
    """The rows of ``table`` its scalar indexes do not cover yet (0 without them)."""
    names = {i.name for i in table.list_indices() if i.columns[0] != "vector"}
    stats = [table.index_stats(name) for name in sorted(names)[:1]]
    return max((int(s.num_unindexed_rows) for s in stats if s is not None), default=0)
