"""The reads a batch's checks make before its commit: the stored row of each content hash, and each new row's
nearest visible neighbours of its agent.

Both come from the write cache's view of the agent where it keeps one (:mod:`.cache`), else from the table
in one trip through lancedb's event loop (:mod:`engram_pipeline.store.one_trip`: the lookup through the BTree
index on ``content_hash`` and one multi-vector search per agent, at once). A neighbour is read without its
vector (:func:`stored_columns`); the rows a batch folds into are read whole, by id (:func:`rows_by_id`). Long
lists of ids or hashes are read in chunks (:func:`engram_pipeline.store.sql.where_in`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from engram_pipeline.model import Memory
from engram_pipeline.store import one_trip
from engram_pipeline.store.access_log import overlay_pending
from engram_pipeline.store.sql import eq, where_in
from engram_pipeline.store.write.cache import Writer
from engram_pipeline.store.write.view import CHECKED, AgentView
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine

NEIGHBOURS = 8
# A search returning whole rows materialises every column of each hit, 1.6x the time of the CHECKED columns
# at 100k rows with the vector index (bench/profile_remember.py); a batch's collapses read their rows whole
# (:func:`.collapse.collapse_writes`).


def visible_neighbours(store: Engine, agent_id: str, vector: list[float], k: int = NEIGHBOURS) -> list[Memory]:
    """The ``k`` nearest rows of the agent that recall would show, each with ``_similarity`` (without their
    vectors: :func:`stored_columns`)."""
    return many_visible_neighbours(store, agent_id, [vector], k)[0]


def many_visible_neighbours(
    store: Engine, agent_id: str, vectors: Sequence[list[float]], k: int = NEIGHBOURS
) -> list[list[Memory]]:
    """:func:`visible_neighbours` of several vectors of one agent, in one query (a multi-vector search is
    several times cheaper than as many single ones)."""
    return one_trip.run(_many_visible_neighbours(store, agent_id, vectors, k))


async def _many_visible_neighbours(
    store: Engine,
    agent_id: str,
    vectors: Sequence[list[float]],
    k: int = NEIGHBOURS,
    columns: Sequence[str] | None = None,
) -> list[list[Memory]]:
    where = f"{eq('agent_id', agent_id)} AND {VISIBLE_SQL}"
    table = store.shard_for(agent_id).memories
    hits = (await one_trip.nearest(table, vectors, where, k=k, columns=columns)).to_pylist()
    out: list[list[Memory]] = [[] for _ in vectors]
    for h in hits:
        h["_similarity"] = 1.0 - float(h.pop("_distance"))
        out[int(h.pop("query_index", 0))].append(h)
    return out


def stored_columns(store: Engine) -> list[str]:
    """The columns a write's checks read of a stored neighbour: all but its vector (the cosine is computed,
    and a neighbour's vector is several times the rest of the row to read)."""
    return [f.name for f in store.memory_schema if f.name != "vector"]


def first_reads(
    store: Writer, rows: Sequence[Memory]
) -> tuple[dict[int, int], dict[str, Memory], dict[int, list[Memory]]]:
    """What a batch's checks start from: the version of each shard's table the batch writes to, read first
    (see :func:`.insert.append_new`); then the stored row of each content hash the store already has and the
    neighbours of the first row of each content hash (by index in ``rows``; of a row whose content is stored
    they go unused). Both come from the write cache's views at that version (:mod:`.cache`), or, for
    the agents it does not keep, from the table in one trip (the module's docstring). The neighbours are
    read before any commit of the batch: after one (a flush) the rows after it read theirs again."""
    first: dict[str, int] = {}
    for i, row in enumerate(rows):
        first.setdefault(row["content_hash"], i)
    versions, views = _views(store, rows)
    hits: list[Memory] = []
    kept: dict[str, Memory] = {}  # the stored rows the views keep whole
    for digest, i in first.items():
        view = views.get(rows[i]["agent_id"])
        if view is not None:
            ids = view.ids_with_hash(digest)
            whole = view.whole(ids[0]) if len(ids) == 1 else None  # two: a race, which _stored_of settles
            if whole is not None:
                kept[digest] = whole
            else:
                hits += [{"id": memory_id, "content_hash": digest} for memory_id in ids]
    near = _nearest_in_views(views, [(i, rows[i]) for i in first.values()])
    rest = [r for r in rows if r["agent_id"] not in views]
    if rest:
        searched = [(i, rows[i]) for i in first.values() if rows[i]["agent_id"] not in views]
        more_hits, more_near = one_trip.run(
            one_trip.together(_hash_hits(store, rest), _neighbours(store, searched, CHECKED))
        )
        hits += more_hits
        near.update(more_near)
    return versions, _stored_of(store, rows, hits) | kept, near


def _views(store: Writer, rows: Sequence[Memory]) -> tuple[dict[int, int], dict[str, AgentView]]:
    """The latest version of each shard's table ``rows`` go to (one trip), and the write cache's view at
    that version of each of their agents it keeps."""
    groups = store._group(rows)
    versions = {k: store.shards[k].appends.latest() for k in groups}
    views: dict[str, AgentView] = {}
    for k, group in groups.items():
        views.update(store.write_cache.views(store, k, versions[k], [r["agent_id"] for r in group]))
    return versions, views


def _nearest_in_views(views: Mapping[str, AgentView], rows: Sequence[tuple[int, Memory]]) -> dict[int, list[Memory]]:
    """The visible neighbours of each ``(index, row)`` whose agent has a view (one product per agent)."""
    by_agent: dict[str, list[tuple[int, Memory]]] = {}
    for i, row in rows:
        if row["agent_id"] in views:
            by_agent.setdefault(row["agent_id"], []).append((i, row))
    out: dict[int, list[Memory]] = {}
    for agent_id, group in by_agent.items():
        found = views[agent_id].nearest([r["vector"] for _, r in group], NEIGHBOURS)
        out.update((i, hits) for (i, _), hits in zip(group, found, strict=True))
    return out


def current_neighbours(store: Writer, row: Memory) -> list[Memory]:
    """The visible neighbours of ``row`` in the table as it is now (the write cache's view, else a search)."""
    _, views = _views(store, [row])
    if row["agent_id"] in views:
        return _nearest_in_views(views, [(0, row)])[0]
    return visible_neighbours(store, row["agent_id"], row["vector"])


async def _hash_hits(store: Engine, rows: Sequence[Memory]) -> list[Memory]:
    """``id`` and ``content_hash`` of the stored rows sharing a content hash with ``rows`` (reads at once):
    two columns through the BTree index on ``content_hash``, then :func:`_stored_of` reads the whole rows of the
    hits only (the vectors make a full row costly to read). A content hash covers the agent id, so a match is
    the same agent's."""
    reads = []
    for k, group in store._group(rows).items():
        hashes = list(dict.fromkeys(r["content_hash"] for r in group))
        for where in where_in("content_hash", hashes):
            reads.append(one_trip.rows(store.shards[k].memories, where, columns=["id", "content_hash"]))
    return [hit for table in await one_trip.together(*reads) for hit in table.to_pylist()]


def _stored_of(store: Engine, rows: Sequence[Memory], hits: Sequence[Memory]) -> dict[str, Memory]:
    """The stored row of each content hash ``hits`` found for ``rows``: their whole rows, read in one trip
    (:func:`_whole_rows`)."""
    if not hits:
        return {}
    shard = {r["content_hash"]: store.shard_of(r["agent_id"]) for r in rows}
    ids: dict[int, list[str]] = {}
    for h in hits:
        ids.setdefault(shard[h["content_hash"]], []).append(h["id"])
    found: dict[str, list[Memory]] = {}
    for r in _whole_rows(store, ids):
        found.setdefault(r["content_hash"], []).append(r)
    return {digest: store._first_committed(group) for digest, group in found.items()}


def neighbours_of(store: Engine, rows: Sequence[tuple[int, Memory]]) -> dict[int, list[Memory]]:
    """The visible neighbours of each ``(index, row)``, one query per agent (the queries run at once)."""
    return one_trip.run(_neighbours(store, rows))


async def _neighbours(
    store: Engine, rows: Sequence[tuple[int, Memory]], columns: Sequence[str] | None = None
) -> dict[int, list[Memory]]:
    by_agent: dict[str, list[tuple[int, Memory]]] = {}
    for i, row in rows:
        by_agent.setdefault(row["agent_id"], []).append((i, row))
    searches = [
        _many_visible_neighbours(store, agent_id, [r["vector"] for _, r in group], columns=columns)
        for agent_id, group in by_agent.items()
    ]
    out: dict[int, list[Memory]] = {}
    for group, found in zip(by_agent.values(), await one_trip.together(*searches), strict=True):
        out.update((i, hits) for (i, _), hits in zip(group, found, strict=True))
    return out


def rows_by_id(store: Engine, rows: Sequence[Memory], *, as_get: bool = False) -> dict[str, Memory]:
    """The whole stored rows of the ids of ``rows`` (each with ``agent_id``), by id: one read per shard, in
    one trip; ``as_get`` counts the reads logged but not yet folded, as :meth:`ShardedEngine.get` does."""
    ids = {k: list(dict.fromkeys(r["id"] for r in group)) for k, group in store._group(rows).items()}
    return {r["id"]: r for r in _whole_rows(store, ids, as_get=as_get)}


def _whole_rows(store: Engine, ids: Mapping[int, Sequence[str]], *, as_get: bool = False) -> list[Memory]:
    """The whole rows of ``ids`` (by shard), every shard's read in one trip through lancedb's event loop
    (``get_many`` looks the ids up shard after shard, not knowing where they are; the synchronous query it
    used to run was several trips, each a hand-off between threads that the writers waiting on a batch make
    slower); ``as_get`` counts the reads logged but not yet folded, as
    :meth:`ShardedEngine.get` does."""
    chunks = [(k, where) for k, group in ids.items() for where in where_in("id", group)]
    if not chunks:
        return []
    reads = [one_trip.rows(store.shards[k].memories, where) for k, where in chunks]
    out: list[Memory] = []
    for (k, chunk), table in zip(chunks, one_trip.run(one_trip.together(*reads)), strict=True):
        if as_get:
            table = overlay_pending(table, store.shards[k].access_log.pending(ids=chunk))
        out += table.to_pylist()
    return out
