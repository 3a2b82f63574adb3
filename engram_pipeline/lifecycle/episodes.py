"""Consolidation stage 1: group an agent's episodic memories into clusters of similar episodes.

Bounded by time, then by topic:

1. **Sessions.** Episodes in creation order are cut wherever no episode was written for
   ``ENGRAM_EPISODE_SESSION_GAP_S`` seconds (a conversation's sessions, a day of tool logs), and a session
   longer than :data:`SESSION_WINDOW` episodes into consecutive windows of that many. A cluster never spans
   two of them, so no cluster swallows a long conversation (a dozen sessions of small talk used to chain into
   one component holding 92-97% of the turns).
2. **Topics.** Inside each window, average linkage (:func:`~engram_pipeline.similarity.average_linkage`)
   with the objective that a cluster's members are, on average, at least ``ENGRAM_EPISODE_CLUSTER_SIMILARITY``
   similar to each other (cosine of the stored vectors; with a precomputed ``graph``, its pairs, a pair
   below its floor counting as 0). Clusters smaller than ``ENGRAM_EPISODE_CLUSTER_MIN_SIZE`` (singletons at
   least) stay unclustered.

Cost: ``O(n * SESSION_WINDOW)`` for ``n`` episodes (one ``m x m`` matrix per window of ``m`` episodes), linear
in episodes. What a fact said again weeks later adds is not lost: the belief stage also votes over the
episodes that speak to the same slot, whatever their session (:func:`~engram_pipeline.lifecycle.beliefs.slot_groups`).

Scope: ``full`` returns every cluster; ``recent`` returns the clusters that hold at least one episode created
after the watermark of the last finished ``consolidate`` run (clusters are still formed over all episodes, so
a new episode joins the older ones of its session that it repeats). ``EpisodeClusters.watermark`` is this
run's ``now``: the next ``recent`` run starts there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.model import utcnow
from engram_pipeline.similarity import PAIRS_SCHEMA, average_linkage
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore

CONSOLIDATE_PASS = "consolidate"
SCOPES = ("recent", "full")
SESSION_WINDOW = 256  # most episodes clustered together at once: bounds the cost of a session of bulk imports


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
    return last_watermarks(store, [agent_id])[agent_id]


def last_watermarks(store: MemoryStore, agent_ids: Sequence[str]) -> dict[str, str | None]:
    """:func:`last_watermark` of every agent of ``agent_ids``, from one read of their ``consolidate`` cursors.

    The watermark lives in the agent's own cursor row (``consolidate/<agent>``), whether a run for that agent
    alone or a sweep over its shard wrote it, so switching between the two loses nothing."""
    saved = store.engine.get_cursors(CONSOLIDATE_PASS, agent_ids)
    out: dict[str, str | None] = {}
    for agent in agent_ids:
        mine = saved.get(agent, {})
        out[agent] = mine.get("watermark") if mine.get("done") else mine.get("since")
    return out


def record_watermark(store: MemoryStore, agent_id: str, clusters: EpisodeClusters) -> None:
    """Mark the stages that consumed ``clusters`` as finished, so the next ``recent`` run starts after them.

    :func:`~engram_pipeline.lifecycle.consolidation.consolidate` does this itself; an orchestrator that runs
    the stages one by one (one Dagster asset per stage) calls it once the last stage succeeded.
    """
    if clusters.scope != "recent" or not clusters.episodes_scanned:
        return  # no new episode: the last watermark still says where the next run starts (nothing to write)
    saved = store.engine.get_cursor(CONSOLIDATE_PASS, agent_id) or {}
    if saved and not saved.get("done"):
        return  # a consolidate() run is in flight; it records its own watermark
    store.engine.set_cursor(
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
    ``ENGRAM_EPISODE_CLUSTER_SIMILARITY``; without it the similarities inside each session window are
    computed here from the stored vectors. ``since`` overrides the recent watermark (default:
    :func:`last_watermark`).
    """
    given = {agent_id: since} if since is not None else None
    return episode_clusters(store, [agent_id], scope=scope, graph=graph, now=now, since=given)[agent_id]


def episode_clusters(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    scope: str = "recent",
    graph: Any = None,
    now: datetime | None = None,
    since: Mapping[str, str | None] | None = None,
) -> dict[str, EpisodeClusters]:
    """:func:`cluster_episodes` for every agent of ``agent_ids`` from one read of their episodes; ``graph`` may
    hold the pairs of all of them (a pair of two agents' episodes joins nothing), ``since`` each agent's
    watermark (default: :func:`last_watermarks`)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    s = store.settings
    now = now or utcnow()
    agents = list(agent_ids)
    if scope == "full":
        since = dict.fromkeys(agents)
    elif since is None or any(a not in since for a in agents):
        since = {**last_watermarks(store, agents), **(since or {})}
    columns = ["id", "agent_id", "created_at"] + (["vector"] if graph is None else [])
    where = f"kind = 'episodic' AND {VISIBLE_SQL} AND vector IS NOT NULL"
    episodes = store.engine.scan_agents(agents, columns=columns, where=where)
    rows: dict[str, list[int]] = {agent: [] for agent in agents}
    for n, agent in enumerate(episodes["agent_id"].to_pylist()):
        rows[agent].append(n)
    own_pairs = _pairs_by_agent(graph, episodes) if graph is not None else {}
    out = {}
    for agent in agents:
        mine = episodes.take(pa.array(rows[agent], pa.int64()))
        if graph is None:
            similar: Similarity = _VectorSimilarity(mine, store.embedder.dimension)
        else:
            similar = _PairSimilarity(own_pairs.get(agent, PAIRS_SCHEMA.empty_table()), mine["id"].to_pylist())
        out[agent] = _clusters(mine, similar, scope=scope, since=since[agent], now=now, settings=s)
    return out


def _clusters(
    episodes: pa.Table, similar: Similarity, *, scope: str, since: str | None, now: datetime, settings: Settings
) -> EpisodeClusters:
    """One agent's clusters from its episodes (``id``, ``created_at``) and how similar they are."""
    ids = episodes["id"].combine_chunks() if episodes.num_rows else pa.array([], pa.string())
    if since is not None and episodes.num_rows:
        cut = pa.scalar(datetime.fromisoformat(since), type=pa.timestamp("us", tz="UTC"))
        recent = set(pc.filter(ids, pc.greater(episodes["created_at"], cut)).to_pylist())
    else:
        recent = set(ids.to_pylist())
    names = ids.to_pylist()
    smallest = max(2, settings.episode_cluster_min_size)
    found = []
    for window in session_windows(episodes["created_at"].to_pylist(), names, settings.episode_session_gap_s):
        if len(window) < smallest or recent.isdisjoint(names[i] for i in window):
            continue
        for group in average_linkage(similar.matrix(window), settings.episode_cluster_similarity):
            cluster = tuple(sorted(names[window[i]] for i in group))
            if len(cluster) >= smallest and not recent.isdisjoint(cluster):
                found.append(cluster)
    found.sort(key=lambda c: (-len(c), c[0]))
    clustered = {i for c in found for i in c}
    return EpisodeClusters(
        scope=scope,
        clusters=tuple(found),
        episodes_scanned=len(recent),
        unclustered=len(recent - clustered),
        since=since,
        watermark=now.isoformat(),
    )


def session_windows(
    times: Sequence[datetime | None], ids: Sequence[str], gap_s: float, *, window: int = SESSION_WINDOW
) -> list[list[int]]:
    """Row indices of episodes cut into sessions (in ``(time, id)`` order, a new one after a pause longer than
    ``gap_s`` seconds), and each session into consecutive windows of at most ``window`` rows.

    >>> from datetime import UTC
    >>> t = [datetime(2026, 1, d, h, tzinfo=UTC) for d, h in [(1, 9), (1, 10), (3, 9), (1, 11)]]
    >>> session_windows(t, ["a", "b", "c", "d"], 6 * 3600)
    [[0, 1, 3], [2]]
    """
    floor = datetime.min.replace(tzinfo=UTC)
    order = sorted(range(len(ids)), key=lambda i: (times[i] or floor, ids[i]))
    gap = timedelta(seconds=gap_s)
    sessions: list[list[int]] = []
    last: datetime | None = None
    for i in order:
        at = times[i] or floor
        if not sessions or last is None or at - last > gap:
            sessions.append([])
        sessions[-1].append(i)
        last = at
    return [s[k : k + window] for s in sessions for k in range(0, len(s), window)]


class Similarity(Protocol):
    def matrix(self, rows: Sequence[int]) -> np.ndarray:
        """The ``len(rows) x len(rows)`` cosine similarities of the episodes at ``rows``."""
        ...


class _VectorSimilarity:
    """Cosines from the stored vectors (normalised here; a zero vector is similar to nothing)."""

    def __init__(self, episodes: pa.Table, dim: int) -> None:
        from engram_pipeline.lifecycle.graph import vectors_of

        v = vectors_of(episodes["vector"], dim) if episodes.num_rows else np.zeros((0, dim), np.float32)
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        self.vectors = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)

    def matrix(self, rows: Sequence[int]) -> np.ndarray:
        v = self.vectors[np.asarray(rows, dtype=np.int64)]
        return np.asarray(v @ v.T, dtype=np.float64)


class _PairSimilarity:
    """Cosines from a neighbour table: a pair it does not hold is below its floor and counts as 0."""

    def __init__(self, pairs: pa.Table, ids: Sequence[str]) -> None:
        self.ids = list(ids)
        self.score: dict[tuple[str, str], float] = {}
        for a, b, x in zip(
            pairs["src_id"].to_pylist(), pairs["dst_id"].to_pylist(), pairs["score"].to_pylist(), strict=True
        ):
            self.score[(a, b)] = self.score[(b, a)] = max(float(x), self.score.get((a, b), float("-inf")))

    def matrix(self, rows: Sequence[int]) -> np.ndarray:
        names = [self.ids[i] for i in rows]
        m = np.eye(len(names))
        for x, a in enumerate(names):
            for y in range(x + 1, len(names)):
                m[x, y] = m[y, x] = self.score.get((a, names[y]), 0.0)
        return m


def _pairs_by_agent(graph: Any, episodes: pa.Table) -> dict[str, pa.Table]:
    """The pairs of ``graph`` between two episodes of one agent, by agent (in the graph's order)."""
    table = graph.to_arrow() if hasattr(graph, "to_arrow") else graph
    pairs = pl.from_arrow(table.select(["src_id", "dst_id", "score"]))
    assert isinstance(pairs, pl.DataFrame)
    owner = pl.DataFrame({"id": episodes["id"].to_pylist(), "agent_id": episodes["agent_id"].to_pylist()})
    owner = owner.cast({"id": pl.String, "agent_id": pl.String})
    pairs = pairs.join(owner.rename({"id": "src_id"}), on="src_id", how="inner", maintain_order="left")
    pairs = pairs.join(
        owner.rename({"id": "dst_id", "agent_id": "dst_agent"}), on="dst_id", how="inner", maintain_order="left"
    ).filter(pl.col("agent_id") == pl.col("dst_agent"))
    schema = table.select(["src_id", "dst_id", "score"]).schema
    return {
        str(agent): part.drop("agent_id", "dst_agent").to_arrow().cast(schema)
        for (agent,), part in pairs.partition_by("agent_id", as_dict=True, maintain_order=True).items()
    }
