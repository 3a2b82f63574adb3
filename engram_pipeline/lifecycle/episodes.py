"""Consolidation stage 1: group an agent's episodic memories into clusters of similar episodes.

Graph-based: the connected components of the neighbour graph restricted to visible episodes and to pairs with
cosine >= ``ENGRAM_EPISODE_CLUSTER_SIMILARITY``; components smaller than ``ENGRAM_EPISODE_CLUSTER_MIN_SIZE``
(singletons at least) stay unclustered. Components chain (``a~b``, ``b~c``), which suits grouping: the belief
stage votes per claim inside a cluster, so an unrelated episode chained in only adds a vote elsewhere.

Scope: ``full`` returns every cluster; ``recent`` returns the clusters that hold at least one episode created
after the watermark of the last finished ``consolidate`` run (clusters are still formed over all episodes, so
a new episode joins the old ones it repeats). ``EpisodeClusters.watermark`` is this run's ``now``: the next
``recent`` run starts there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.model import utcnow
from engram_pipeline.similarity import components
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

CONSOLIDATE_PASS = "consolidate"
SCOPES = ("recent", "full")


@dataclass(frozen=True)
class EpisodeClusters:
    """Clusters of episode ids (each sorted; largest first) and the scope's watermarks (ISO times)."""

    scope: str
    clusters: tuple[tuple[str, ...], ...]
    episodes_scanned: int  # episodes in scope: all of them (full) or those created after ``since`` (recent)
    unclustered: int  # episodes in scope that are in no returned cluster
    since: str | None  # recent scope: episodes created after this count as new (None: all do)
    watermark: str  # this run's now: where the next recent run starts

    @property
    def since_time(self) -> datetime | None:
        return datetime.fromisoformat(self.since) if self.since else None


def last_watermark(store: MemoryStore, agent_id: str) -> str | None:
    """The watermark of the last finished ``consolidate`` run of the agent (or of the unfinished one's start)."""
    saved = store.get_cursor(CONSOLIDATE_PASS, agent_id)
    if not saved:
        return None
    return saved.get("watermark") if saved.get("done") else saved.get("since")


def record_watermark(store: MemoryStore, agent_id: str, clusters: EpisodeClusters) -> None:
    """Mark the stages that consumed ``clusters`` as finished, so the next ``recent`` run starts after them.

    :func:`~engram_pipeline.lifecycle.consolidation.consolidate` does this itself; an orchestrator that runs
    the stages one by one (one Dagster asset per stage) calls it once the last stage succeeded.
    """
    if clusters.scope != "recent" or not clusters.episodes_scanned:
        return  # no new episode: the last watermark still says where the next run starts (nothing to write)
    saved = store.get_cursor(CONSOLIDATE_PASS, agent_id) or {}
    if saved and not saved.get("done"):
        return  # a consolidate() run is in flight; it records its own watermark
    store.set_cursor(
        CONSOLIDATE_PASS, agent_id, {**saved, "done": True, "watermark": clusters.watermark, "scope": clusters.scope}
    )


def cluster_episodes(
    store: MemoryStore,
    agent_id: str,
    *,
    scope: str = "recent",
    graph: Any = None,
    now: datetime | None = None,
    since: str | None = None,
) -> EpisodeClusters:
    """Cluster the agent's visible episodes; see the module docstring.

    ``graph`` is a neighbour table (``src_id``, ``dst_id``, ``score``) whose floor is at most
    ``ENGRAM_EPISODE_CLUSTER_SIMILARITY``; without it the graph of the episodes is computed here. ``since``
    overrides the recent watermark (default: :func:`last_watermark`).
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    s = store.settings
    now = now or utcnow()
    if scope == "recent" and since is None:
        since = last_watermark(store, agent_id)
    if scope == "full":
        since = None
    columns = ["id", "created_at"] + (["vector"] if graph is None else [])
    episodes = store.scan(
        agent_id, columns=columns, where=f"kind = 'episodic' AND {VISIBLE_SQL} AND vector IS NOT NULL"
    )
    ids = episodes["id"].combine_chunks() if episodes.num_rows else pa.array([], pa.string())
    if since is not None and episodes.num_rows:
        cut = pa.scalar(datetime.fromisoformat(since), type=pa.timestamp("us", tz="UTC"))
        recent = set(pc.filter(ids, pc.greater(episodes["created_at"], cut)).to_pylist())
    else:
        recent = set(ids.to_pylist())
    if graph is None:
        pairs = _episode_graph(episodes, store.embedder.dimension, s.episode_cluster_similarity)
    else:
        table = graph.to_arrow() if hasattr(graph, "to_arrow") else graph
        keep = pc.and_(pc.is_in(table["src_id"], value_set=ids), pc.is_in(table["dst_id"], value_set=ids))
        pairs = table.filter(keep)
    found = [
        tuple(c)
        for c in components(pairs, s.episode_cluster_similarity)
        if len(c) >= max(2, s.episode_cluster_min_size) and not recent.isdisjoint(c)
    ]
    clustered = {i for c in found for i in c}
    return EpisodeClusters(
        scope=scope,
        clusters=tuple(found),
        episodes_scanned=len(recent),
        unclustered=len(recent - clustered),
        since=since,
        watermark=now.isoformat(),
    )


def _episode_graph(episodes: pa.Table, dim: int, floor: float) -> pa.Table:
    from engram_pipeline.lifecycle.graph import vectors_of
    from engram_pipeline.similarity import PAIRS_SCHEMA, neighbour_graph

    if episodes.num_rows < 2:
        return PAIRS_SCHEMA.empty_table()
    return neighbour_graph(episodes["id"], vectors_of(episodes["vector"], dim), floor=floor)
