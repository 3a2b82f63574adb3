"""One agent's neighbour graph: the similar pairs every comparing pass starts from.

Contradiction detection, the corpus merge and competition-aware confidence decay all need the pairs of an
agent's memories above some cosine. Reading the vectors and multiplying them is the expensive part, so it is
done once, here, with the lowest floor any of those passes needs; each pass takes the result as an optional
``graph`` argument and filters its own band out of it (Dagster materialises the graph once as an asset and
hands it to every pass of the run). A pass given no graph calls :func:`agent_graph` itself.

A pass that judges pairs one by one takes at most :data:`CANDIDATES_PER_ROW` of them per row (a pair is
judged when it is among the nearest of either of its rows), so its work grows linearly with the rows even where
the pairs above its floor grow with their square (a long conversation that keeps saying the same things);
``agent_graph(..., per_row=CANDIDATES_PER_ROW)`` computes only those pairs.

Only rows recall would show take part: hidden rows (``superseded``, ``archived``, or with a
``superseded_by``) are never compared, merged or flagged, and rows without a vector cannot be.

>>> from engram_pipeline.settings import Settings
>>> graph_floor(Settings(contradiction_threshold=0.8, merge_threshold=0.85, competition_min_similarity=0.6))
0.6
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from engram_pipeline.settings import Settings
from engram_pipeline.similarity import PAIRS_SCHEMA, nearest_graph, neighbour_graph
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

# Nearest candidates per row a pass judges (the corpus merge's judge, the contradiction rules): a pair is judged
# when it is among the nearest of either side.
CANDIDATES_PER_ROW = 8


def graph_floor(settings: Settings) -> float:
    """The lowest band any pass over the graph needs: contradictions, merge band, competition, episode clusters."""
    return min(
        settings.contradiction_threshold,
        settings.merge_threshold,
        settings.competition_min_similarity,
        settings.episode_cluster_similarity,
    )


def agent_graph(
    store: MemoryStore,
    agent_id: str | Sequence[str],
    *,
    floor: float | None = None,
    include_hidden: bool = False,
    version: int | None = None,
    per_row: int | None = None,
    rows: str | None = None,
) -> pa.Table:
    """Pairs ``(src_id, dst_id, score)`` of the agent's memories with cosine ``>= floor``.

    ``floor`` defaults to :func:`graph_floor` of the store's settings (after the embedder's threshold
    profile), lowered to the merge judge's candidate floor (:mod:`engram_pipeline.judge`). Reads ids and
    vectors once, column-wise; rows without a vector are left out, and so are hidden rows unless
    ``include_hidden``. The table has :data:`~engram_pipeline.similarity.PAIRS_SCHEMA`, one row
    per unordered pair. ``version``: the graph as of that ``memories`` table version (a resumed pass's start).
    ``per_row``: only the pairs among the ``per_row`` nearest of either of their rows
    (:func:`~engram_pipeline.similarity.nearest_graph`: the same as cutting the whole graph with
    :func:`~engram_pipeline.similarity.nearest_per_row`, without computing it). ``rows``: an SQL filter of the
    rows that take part, instead of the visible ones.

    Given a sequence of agent ids (a sweep), the rows of all of them are read at once and each agent's graph is
    computed on its own rows (no pair ever spans two agents), then the graphs are concatenated: each agent's
    part is the graph :func:`agent_graph` gives for that agent alone.
    """
    if floor is None:
        from engram_pipeline.judge import get_judge

        floor = min(graph_floor(store.settings), get_judge(store).floor)  # the merge judge's candidates too
    where = "vector IS NOT NULL" + ("" if include_hidden else f" AND ({rows or VISIBLE_SQL})")
    dim = store.embedder.dimension
    if isinstance(agent_id, str):
        table = store.engine.scan(agent_id, columns=["id", "vector"], where=where, version=version)
        return _graph(table, dim, floor, per_row)
    table = store.engine.scan_agents(agent_id, columns=["id", "agent_id", "vector"], where=where, version=version)
    if table.num_rows < 2:
        return PAIRS_SCHEMA.empty_table()
    owner = table["agent_id"].combine_chunks().dictionary_encode()
    order = np.argsort(owner.indices.to_numpy(zero_copy_only=False), kind="stable")  # each agent's rows, in order
    table = table.take(pa.array(order))
    counts = np.bincount(owner.indices.to_numpy(zero_copy_only=False), minlength=len(owner.dictionary))
    parts = []
    start = 0
    for n in counts[counts > 0]:
        parts.append(_graph(table.slice(start, int(n)), dim, floor, per_row))
        start += int(n)
    return pa.concat_tables(parts)


def _graph(table: pa.Table, dim: int, floor: float, per_row: int | None) -> pa.Table:
    if table.num_rows < 2:
        return PAIRS_SCHEMA.empty_table()
    vectors = vectors_of(table["vector"], dim)
    if per_row is None:
        return neighbour_graph(table["id"], vectors, floor=floor)
    return nearest_graph(table["id"], vectors, floor=floor, k=per_row)


def vectors_of(column: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    """A fixed-size-list vector column (without nulls) as an ``(n, dim)`` float32 matrix, copying once."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.reshape(len(arr), dim), dtype=np.float32)
