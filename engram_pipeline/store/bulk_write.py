"""The write-time checks of a bulk import, vectorised: the outcome of ``remember`` on each row in order.

``remember`` checks a new row against its nearest visible rows of the same agent: the merge judge may fold it
into one of them (a semantic duplicate), else the contradiction rules may flag or supersede some
(:mod:`engram_pipeline.store.write_path`). :func:`write_checked` gives a batch of new rows the outcome of
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engram_pipeline.model import Memory
from engram_pipeline.store.write_path import (
    NEIGHBOURS,
    _judge,
    _near,
    _neighbours_of,
    apply_contradictions,
    collapse_many,
    insert_new,
)
from engram_pipeline.visibility import is_visible

if TYPE_CHECKING:
    from engram_pipeline.store.core import MemoryStore

_CHUNK = 1024  # rows per block of the within-batch product (bounds its memory for a large single agent)


@dataclass(frozen=True)
class BulkWrite:
    """What :func:`write_checked` did with a batch."""

    inserted: tuple[str, ...]  # ids of the rows written
    lost_races: int  # rows whose content a concurrent writer stored first (exact duplicates after all)
    semantic_duplicates: int  # rows folded into an existing row (of the store or of the batch)
    contradictions: int  # contradictions recorded (flagged, or superseded under that policy)


def write_checked(
    store: MemoryStore, rows: Sequence[Memory], *, checked_at: Mapping[int, int], checked: Sequence[bool], actor: str
) -> BulkWrite:
    """Check ``rows`` (new content, with vectors) as ``remember`` would one after another, then write them.

    ``checked_at`` is, per shard, the table version the exact-duplicate check read (see
    :func:`engram_pipeline.store.write_path.insert_new`); ``checked[i]`` False writes ``rows[i]`` unchecked.
    """
    if not any(checked):
        inserted = insert_new(store, rows, checked_at=checked_at) if rows else []
        return BulkWrite(tuple(inserted), len(rows) - len(inserted), 0, 0)
    stored = _neighbours_of(store, [(i, r) for i, r in enumerate(rows) if checked[i]])
    earlier = _earlier_near(rows, _near(store))
    supersede = store.settings.contradiction_policy == "supersede"
    kept = [True] * len(rows)
    hidden: set[str] = set()
    merges: list[tuple[Memory, Memory, float]] = []
    found: list[tuple[Memory, Memory, Any]] = []
    for i, row in enumerate(rows):
        if not checked[i]:
            continue
        pool = [n for n in stored.get(i, []) if n["id"] not in hidden]
        pool += [
            {**rows[j], "_similarity": cos}
            for j, cos in earlier[i]
            if kept[j] and is_visible(rows[j]) and rows[j]["id"] not in hidden
        ]
        pool.sort(key=lambda n: -n["_similarity"])
        same, hits = _judge(store, row, pool[:NEIGHBOURS])
        if same is not None:
            kept[i] = False
            merges.append((same, row, float(same["_similarity"])))
            continue
        found += [(row, n, hit) for n, hit in hits]
        if supersede:
            hidden.update(n["id"] for n, _ in hits)
    new = [r for r, keep in zip(rows, kept, strict=True) if keep]
    inserted = insert_new(store, new, checked_at=checked_at) if new else []
    # A row a concurrent writer stored first is that writer's row: what it decided stands, not ours.
    batch_ids = {r["id"] for r in rows}
    gone = batch_ids - set(inserted)
    merges = [m for m in merges if m[0]["id"] not in gone]
    found = [f for f in found if f[0]["id"] not in gone and f[1]["id"] not in gone]
    if merges:
        collapse_many(store, merges, actor=actor)
    apply_contradictions(store, found, actor=actor)
    return BulkWrite(tuple(inserted), len(new) - len(inserted), len(merges), len(found))


def _earlier_near(rows: Sequence[Memory], near: float) -> list[list[tuple[int, float]]]:
    """For each row, the earlier rows of its agent in ``rows`` at cosine ``near`` or above, with the cosine."""
    out: list[list[tuple[int, float]]] = [[] for _ in rows]
    by_agent: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_agent.setdefault(r["agent_id"], []).append(i)
    for index in by_agent.values():
        if len(index) < 2:
            continue
        vecs = np.asarray([rows[i]["vector"] for i in index], dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True) + 1e-12
        for start in range(0, len(index), _CHUNK):
            block = vecs[start : start + _CHUNK] @ vecs[: start + _CHUNK].T
            a, b = np.nonzero(block >= near)
            for x, y in zip(a.tolist(), b.tolist(), strict=True):
                if y < start + x:  # an earlier row only
                    out[index[start + x]].append((index[y], float(block[x, y])))
    return out
