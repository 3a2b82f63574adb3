"""The write-time checks of a bulk import, vectorised: the outcome of ``remember`` on each row in order.

``remember`` checks a new row against its nearest visible rows of the same agent: the merge judge may fold it
into one of them (a semantic duplicate), else the contradiction rules may flag or supersede some
(:mod:`.batch`). :func:`write_checked` gives a batch of new rows the outcome of
that many ``remember`` calls one after another, with the same functions deciding, but reads and writes in
bulk:

* against the store: one multi-vector neighbour query per agent for the whole batch;
* within the batch: one matrix product per agent, of which only the pairs at or above the lowest cosine at
  which the judge or the contradiction bands act are kept (each row against the rows before it);
* the decisions then run row by row in order over those candidates (the nearest ``NEIGHBOURS`` of the rows
  that are visible at that point: a row folded into another is not there, a superseded row is hidden);
* one append of the rows that stay, one compare-and-set batch for the collapses, one for the
  contradictions and one append of their links.

The store's nearest rows are read once, before the batch: under policy ``supersede`` a store row hidden by a
row of the batch leaves its place among a later row's candidates empty, where a ``remember`` would see the
next nearest row. Rows given with ``checked=False`` (an export's rows, restored as they were) are written
without checks but are candidates for the rows after them when visible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engram_pipeline.model import Memory
from engram_pipeline.store.errors import MemoryNotFound
from engram_pipeline.store.marks import apply_contradictions
from engram_pipeline.store.write.checks import decide_many, near_cosine
from engram_pipeline.store.write.collapse import collapse_many
from engram_pipeline.store.write.insert import insert_new
from engram_pipeline.store.write.reads import NEIGHBOURS, neighbours_of, rows_by_id
from engram_pipeline.store.write.view import CHECKED
from engram_pipeline.visibility import VISIBLE_SQL, is_visible

if TYPE_CHECKING:
    from engram_pipeline.store.write.cache import Writer

_CHUNK = 1024  # rows per block of the within-batch product (bounds its memory for a large single agent)


@dataclass(frozen=True)
class BulkWrite:
    """What :func:`write_checked` did with a batch."""

    inserted: tuple[str, ...]  # ids of the rows written
    lost_races: int  # rows whose content a concurrent writer stored first (exact duplicates after all)
    semantic_duplicates: int  # rows folded into an existing row (of the store or of the batch)
    contradictions: int  # contradictions recorded (flagged, or superseded under that policy)


def write_checked(
    store: Writer,
    rows: Sequence[Memory],
    *,
    checked_at: Mapping[int, int],
    checked: Sequence[bool],
    actor: str,
    rounds: int = 3,
) -> BulkWrite:
    """Check ``rows`` (new content, with vectors) as ``remember`` would one after another, then write them.

    ``checked_at`` is, per shard, the table version the exact-duplicate check read (see
    :func:`.insert.insert_new`); ``checked[i]`` False writes ``rows[i]`` unchecked.
    A row whose stored row to fold into is deleted before the fold is checked and written again after the
    batch, as ``remember`` does (:func:`.batch.remember_batch`), up to ``rounds``
    times; past that it is left out, as a lost race.
    """
    if not any(checked):
        inserted = insert_new(store, rows, checked_at=checked_at) if rows else []
        return BulkWrite(tuple(inserted), len(rows) - len(inserted), 0, 0)
    todo = [i for i in range(len(rows)) if checked[i]]
    near = near_cosine(store)
    unit = _unit(np.asarray([r["vector"] for r in rows], dtype=np.float32))  # the batch's vectors, read once
    pools = _Pools(rows, unit, _stored_near(store, rows, unit, todo, near), near)
    # Decided for all rows at once on the pools they have if every earlier row stays and shows (most batches);
    # a row whose candidates an earlier decision removed (a collapse, a superseded row) is decided again.
    decided = dict(zip(todo, decide_many(store, [(rows[i], pools.top(i)) for i in todo]), strict=True))
    supersede = store.settings.contradiction_policy == "supersede"
    kept = [True] * len(rows)
    merges: list[tuple[Memory, Memory, float]] = []
    found: list[tuple[Memory, Memory, Any]] = []
    for i in todo:
        row = rows[i]
        same, hits = decided[i] if not pools.touched(i) else decide_many(store, [(row, pools.top(i))])[0]
        if same is not None:
            kept[i] = False
            pools.remove(row["id"])
            merges.append((same, row, float(same["_similarity"])))
            continue
        found += [(row, n, hit) for n, hit in hits]
        if supersede:
            for n, _ in hits:
                pools.remove(n["id"])
    new = [r for r, keep in zip(rows, kept, strict=True) if keep]
    inserted = insert_new(store, new, checked_at=checked_at) if new else []
    # A row a concurrent writer stored first is that writer's row: what it decided stands, not ours.
    batch_ids = {r["id"] for r in rows}
    gone = batch_ids - set(inserted)
    merges = [m for m in merges if m[0]["id"] not in gone]
    found = [f for f in found if f[0]["id"] not in gone and f[1]["id"] not in gone]
    # a row edited without pause meanwhile is not folded into (remember would tell its writer so); a write
    # whose row was deleted meanwhile is checked again below
    merges, vanished = _whole(store, merges)
    failed = collapse_many(store, merges, actor=actor) if merges else {}
    apply_contradictions(store, found, actor=actor)
    folded = sum(1 for existing, _, _ in merges if existing["id"] not in failed)
    done = BulkWrite(tuple(inserted), len(new) - len(inserted), folded, len(found))
    again = [*vanished, *(n for e, n, _ in merges if isinstance(failed.get(e["id"]), MemoryNotFound))]
    if not again:
        return done
    if not rounds:
        return dataclasses.replace(done, lost_races=done.lost_races + len(again))
    redo = write_checked(
        store, again, checked_at=checked_at, checked=[True] * len(again), actor=actor, rounds=rounds - 1
    )
    return BulkWrite(
        done.inserted + redo.inserted,
        done.lost_races + redo.lost_races,
        done.semantic_duplicates + redo.semantic_duplicates,
        done.contradictions + redo.contradictions,
    )


class _Pools:
    """Each row's candidates: its stored neighbours (read before the batch) and the earlier rows of its agent in
    the batch at the near cosine or above that are visible, nearest first (ties: stored rows, then earlier
    rows in order); rows removed by a decision (folded into another, or superseded) leave every pool."""

    def __init__(
        self, rows: Sequence[Memory], unit: np.ndarray, stored: Mapping[int, list[Memory]], near: float
    ) -> None:
        self.rows, self.stored = rows, stored
        self.earlier = _earlier_near(rows, unit, near)
        self.shown = np.fromiter((is_visible(r) for r in rows), dtype=bool, count=len(rows))
        self.position = {r["id"]: i for i, r in enumerate(rows)}
        self.removed: set[str] = set()
        self.dropped = np.zeros(len(rows), dtype=bool)  # the rows of ``removed`` that are in the batch

    def remove(self, memory_id: str) -> None:
        self.removed.add(memory_id)
        if memory_id in self.position:
            self.dropped[self.position[memory_id]] = True

    def touched(self, i: int) -> bool:
        """Whether a removal changed row ``i``'s candidates since the batch began."""
        if not self.removed:
            return False
        index, _ = self.earlier[i]
        return bool(self.dropped[index].any()) or any(n["id"] in self.removed for n in self.stored.get(i, []))

    def top(self, i: int) -> list[Memory]:
        """Row ``i``'s nearest ``NEIGHBOURS`` candidates now, each with ``_similarity``."""
        stored = [n for n in self.stored.get(i, []) if n["id"] not in self.removed]
        index, cos = self.earlier[i]
        show = self.shown[index] & ~self.dropped[index]
        index, cos = index[show], cos[show]
        sims = np.concatenate([np.asarray([n["_similarity"] for n in stored], dtype=np.float64), cos])
        order = np.argsort(-sims, kind="stable")[:NEIGHBOURS].tolist()
        return [
            stored[k] if k < len(stored) else {**self.rows[int(index[k - len(stored)])], "_similarity": float(sims[k])}
            for k in order
        ]


def _stored_near(
    store: Writer, rows: Sequence[Memory], unit: np.ndarray, todo: Sequence[int], near: float
) -> dict[int, list[Memory]]:
    """The store's nearest visible rows of each row ``rows[i]`` of ``todo`` (``unit``: the rows' vectors at unit
    length) at cosine ``near`` or above (the candidates
    below it never act: :func:`.checks.decide_many`), as ``remember`` reads them (``neighbours_of``).

    An agent whose table has no vector index is searched by an exact scan either way: here by one read of the
    visible vectors of all such agents of the batch (one query per shard: one scan per agent, 40 for a
    20,000-row import of 10 agents, took 1.3 of its 9.9 s of CPU), then one matrix product per agent for all its
    rows of the batch (the within-batch product's cosines), not one scan per row. That read carries the
    :data:`.view.CHECKED` columns, all the decisions read of a candidate; a row a write collapses into is
    read whole later (:func:`_whole`). Reading every candidate whole here (a second read, by id, of every column
    but the vector) and copying the whole row per hit made this function 22% of a profiled 20,000-row import
    (bench_write_path.py's bulk rows), 13% since.
    """
    by_agent: dict[str, list[tuple[int, Memory]]] = {}
    for i in todo:
        by_agent.setdefault(rows[i]["agent_id"], []).append((i, rows[i]))
    out: dict[int, list[Memory]] = {}
    indexed = {
        k: any(idx.columns[0] == "vector" for idx in store.shards[k].memories.list_indices())
        for k in {store.shard_of(a) for a in by_agent}
    }
    scanned = [a for a in by_agent if not indexed[store.shard_of(a)]]
    searched = [x for a in by_agent if indexed[store.shard_of(a)] for x in by_agent[a]]
    if searched:
        found = neighbours_of(store, searched)
        out.update((i, [n for n in found[i] if n["_similarity"] >= near]) for i, _ in searched)
    table = store.scan_agents(scanned, columns=[*CHECKED, "vector"], where=VISIBLE_SQL) if scanned else None
    if table is None or not table.num_rows:
        return out
    checked = table.select(list(CHECKED)).to_pylist()
    every = _unit(table["vector"].combine_chunks().flatten().to_numpy().reshape(table.num_rows, -1))
    of_agent: dict[str, list[int]] = {}
    for j, r in enumerate(checked):
        of_agent.setdefault(r["agent_id"], []).append(j)
    for agent_id in scanned:
        if agent_id not in of_agent:
            continue
        group, at = by_agent[agent_id], np.asarray(of_agent[agent_id], dtype=np.int64)
        vecs = every[at]
        queries = unit[[i for i, _ in group]]
        step = max(1, 2**24 // len(at))  # bounds the block of cosines in memory
        k = min(NEIGHBOURS, len(at))
        for start in range(0, len(group), step):
            block = queries[start : start + step] @ vecs.T
            top = (
                np.argpartition(-block, k - 1, axis=1)[:, :k] if k < len(at) else np.tile(np.arange(k), (len(block), 1))
            )
            cos = np.take_along_axis(block, top, axis=1)
            order = np.argsort(-cos, axis=1, kind="stable")  # nearest first
            top, cos = np.take_along_axis(top, order, axis=1), np.take_along_axis(cos, order, axis=1)
            xs, ys = np.nonzero(cos >= near)  # by row, nearest first
            for x, j, similarity in zip(xs.tolist(), at[top[xs, ys]].tolist(), cos[xs, ys].tolist(), strict=True):
                out.setdefault(group[start + x][0], []).append({**checked[j], "_similarity": similarity})
    return out


def _whole(
    store: Writer, merges: list[tuple[Memory, Memory, float]]
) -> tuple[list[tuple[Memory, Memory, float]], list[Memory]]:
    """``merges`` with each existing row that was read with the :data:`.view.CHECKED` columns only read
    whole (a collapse writes from the whole row), as ``remember``'s collapse reads it; and apart, the new
    rows of the merges whose existing row is gone."""
    names = set(store.memory_schema.names)
    partial = [e for e, _, _ in merges if not e.keys() >= names]
    whole = rows_by_id(store, partial) if partial else {}
    missing = {e["id"] for e in partial} - whole.keys()
    kept, vanished = [], []
    for e, n, s in merges:
        if e["id"] in missing:
            vanished.append(n)
        else:
            kept.append(({**whole[e["id"]], "_similarity": e["_similarity"]} if e["id"] in whole else e, n, s))
    return kept, vanished


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, in float32 (as the within-batch product)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    unit: np.ndarray = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12)
    return unit


def _earlier_near(rows: Sequence[Memory], unit: np.ndarray, near: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each row, the earlier rows of its agent in ``rows`` at cosine ``near`` or above (their indices in
    order, and the cosines; ``unit``: the rows' vectors at unit length)."""
    none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
    out: list[tuple[np.ndarray, np.ndarray]] = [none] * len(rows)
    by_agent: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_agent.setdefault(r["agent_id"], []).append(i)
    for members in by_agent.values():
        if len(members) < 2:
            continue
        index = np.asarray(members, dtype=np.int64)
        vecs = unit[index]
        for start in range(0, len(members), _CHUNK):
            block = vecs[start : start + _CHUNK] @ vecs[: start + _CHUNK].T
            # an earlier row only: column y < start + x
            earlier = np.arange(block.shape[1])[None, :] < (start + np.arange(block.shape[0]))[:, None]
            a, b = np.nonzero((block >= near) & earlier)
            cuts = np.searchsorted(a, np.arange(block.shape[0] + 1))
            for x in range(block.shape[0]):
                ys = b[cuts[x] : cuts[x + 1]]
                out[members[start + x]] = (index[ys], block[x, ys].astype(np.float64))
    return out
