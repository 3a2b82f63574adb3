"""Health of one agent's memory: a score in [0, 1], the tier distribution and the signals behind the score.

Shares are over the agent's *visible* rows (what default recall shows: not superseded, not archived), except
``superseded_share`` and ``archived_share``, which are over every row. The score::

    score = clip(1 - 0.35 * contradiction_share      visible rows with status ``contradicted``
                   - 0.25 * duplicate_cluster_ratio  visible rows in open merge clusters
                   - 0.20 * stale_share              visible rows not accessed (else created) in 30 days
                   - 0.20 * low_confidence_share,    visible rows in the ``archive`` tier (confidence < 0.40)
                 0, 1)

so a corpus without contradictions, duplicates, stale or doubtful rows scores 1 and one made only of them
scores 0; an empty agent scores 1.

Convergence, beside the score: ``noise_count`` and ``noise_share`` are the visible rows whose stored information
score (:mod:`engram_pipeline.information`) is below ``ENGRAM_NOISE_THRESHOLD``, and ``next_archive_noise`` /
``next_archive_faded`` what the next archival pass at the report's time would archive
(:func:`engram_pipeline.lifecycle.archival.candidates`: noise the retention policy forgets, faded rows it lets
go). A store that converges shows a noise share falling towards what its young chit-chat holds, and nothing
left to archive. Open merge clusters are the members of the agent's latest *pending*
corpus-merge plan (``duplicate_source = "plan"``); without one, the rows in a pair of the merge band
``[MEMORY_CONSOLIDATION_MERGE_THRESHOLD, MEMORY_DUPLICATE_THRESHOLD)`` of the neighbour graph when ``graph``
is given or the agent has at most ``GRAPH_MAX_ROWS`` visible rows (``"graph"``); else 0 (``"none"``).

:func:`health_sweep` reports on a set of agents from one read of their rows, links and plans (what the shard
sweeps and the pipeline call); :func:`health` is the sweep of one agent.

:func:`render_health_chart` draws the tier distribution and the confidence histogram to a PNG (matplotlib,
Agg backend: no display needed); :func:`health_chart` does both in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.extras import missing
from engram_pipeline.lifecycle.archival import candidates
from engram_pipeline.lifecycle.graph import agent_graph
from engram_pipeline.model import CONFIDENCE_TIERS, PlanRecord, confidence_tier, confidences, utcnow
from engram_pipeline.similarity.bands import filter_bands, merge_band
from engram_pipeline.store.access_log import overlay_pending

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

STALE_DAYS = 30
GRAPH_MAX_ROWS = 20_000
WEIGHTS = {"contradiction": 0.35, "duplicate": 0.25, "stale": 0.20, "low_confidence": 0.20}
_COLUMNS = [
    "id", "version", "status", "superseded_by", "confidence", "access_count", "created_at", "last_accessed_at",
    "importance_factors",
]  # fmt: skip


@dataclass(frozen=True)
class HealthReport:
    agent_id: str
    score: float
    total: int
    visible: int
    tiers: dict[str, int]
    active_contradictions: int  # unordered ``contradicts`` pairs whose two rows are visible
    contradicted_share: float
    stale_count: int
    stale_share: float
    duplicate_cluster_ratio: float
    duplicate_source: str  # "plan" | "graph" | "none"
    never_recalled_share: float
    low_confidence_share: float
    growth_7d: int  # rows created in the last 7 days
    growth_30d: int
    superseded_share: float
    archived_share: float
    noise_count: int  # visible rows whose information score is below ENGRAM_NOISE_THRESHOLD
    noise_share: float
    next_archive_noise: int  # what the next archival at ``at`` would archive as noise
    next_archive_faded: int  # ... and as faded (below the confidence floor, let go by the retention policy)
    at: str
    weights: dict[str, float] = field(default_factory=lambda: dict(WEIGHTS))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def health(store: MemoryStore, agent_id: str, *, now: datetime | None = None, graph: Any = None) -> HealthReport:
    """The health report of ``agent_id`` at ``now``; see the module docstring for the score. The sweep of one
    agent (:func:`health_sweep`)."""
    return health_sweep(store, [agent_id], now=now, graph=graph)[agent_id]


def health_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    now: datetime | None = None,
    graph: Any = None,
    run_id: str | None = None,  # a read records no run: taken for the sweeps' one signature
) -> dict[str, HealthReport]:
    """:func:`health` of every agent of ``agent_ids`` from one read of each kind: their rows (with the reads not
    folded yet), their links, their latest plans and, for the agents that need one, their neighbour graphs.
    ``graph``, if given, holds the pairs of all the agents."""
    agents = sorted(set(agent_ids))
    if not agents:
        return {}
    now = now or utcnow()
    rows = store.engine.scan_agents(agents, columns=["agent_id", *_COLUMNS])
    rows = overlay_pending(rows, store.engine.pending_access(agents))  # read-only
    parts = _by_agent(rows, agents)
    visible = {agent: _visible(table) for agent, table in parts.items()}
    visible_ids = {agent: set(vis["id"].to_pylist()) for agent, (vis, _, _) in visible.items()}
    plans = store.engine.latest_plans(agents)
    duplicates = _duplicate_rows(store, visible_ids, plans, graph)
    contradictions = _active_contradictions(store.engine.links_for_agent(agents), visible_ids)
    upcoming = candidates(store, agents, now=now)
    next_archive = {(a, r): n for a, r, n in upcoming.group_by("agent_id", "reason").len().iter_rows() if a is not None}
    threshold = store.settings.noise_threshold
    return {
        agent: _report(
            agent,
            parts[agent],
            visible[agent],
            duplicates[agent],
            contradictions.get(agent, 0),
            now,
            noise=_noise_count(visible[agent][0], threshold),
            next_archive=(next_archive.get((agent, "noise"), 0), next_archive.get((agent, "faded"), 0)),
        )
        for agent in agents
    }


def _noise_count(visible: pa.Table, threshold: float) -> int:
    """Visible rows whose stored information score is below ``threshold`` (a row not scored yet is not)."""
    if visible.num_rows == 0:
        return 0
    factors = pl.Series(visible["importance_factors"].to_pylist(), dtype=pl.String)
    info = factors.str.json_path_match("$.information").cast(pl.Float64)
    return int((info < threshold).sum())


def _by_agent(rows: pa.Table, agents: list[str]) -> dict[str, pa.Table]:
    """``rows`` (with ``agent_id``) split by agent, every agent of ``agents`` present (empty without rows)."""
    out = {agent: rows.slice(0, 0) for agent in agents}
    if rows.num_rows == 0:
        return out
    owner = rows["agent_id"].combine_chunks().dictionary_encode()
    index = owner.indices.to_numpy(zero_copy_only=False)
    rows = rows.take(pa.array(np.argsort(index, kind="stable")))
    start = 0
    for name, n in zip(owner.dictionary.to_pylist(), np.bincount(index, minlength=len(owner.dictionary)), strict=True):
        out[name] = rows.slice(start, int(n))
        start += int(n)
    return out


def _visible(rows: pa.Table) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The rows default recall shows, and the masks of the superseded and the archived rows."""
    hidden_by = pc.is_valid(rows["superseded_by"]).to_numpy(zero_copy_only=False)
    st = np.array(rows["status"].to_pylist(), dtype=object)
    superseded = (st == "superseded") | hidden_by
    archived = (st == "archived") & ~superseded
    return rows.filter(pa.array(~superseded & ~archived)), superseded, archived


def _report(
    agent_id: str,
    rows: pa.Table,
    visible: tuple[pa.Table, np.ndarray, np.ndarray],
    duplicates: tuple[set[str], str],
    active_contradictions: int,
    now: datetime,
    *,
    noise: int = 0,
    next_archive: tuple[int, int] = (0, 0),
) -> HealthReport:
    """One agent's report from its rows, its visible ones, its rows in open merge clusters (and where from),
    its visible noise and what the next archival would take (noise, faded)."""
    total = rows.num_rows
    vis, superseded, archived = visible
    n = vis.num_rows
    conf = confidences(vis["confidence"])
    tiers = {t: 0 for t in CONFIDENCE_TIERS}
    for c in conf:
        tiers[confidence_tier(float(c))] += 1
    cut = pa.scalar(now - timedelta(days=STALE_DAYS), type=pa.timestamp("us", tz="UTC"))
    last = pc.coalesce(vis["last_accessed_at"], vis["created_at"])
    stale = int(pc.sum(pc.less(last, cut)).as_py() or 0) if n else 0
    never = int(pc.sum(pc.equal(pc.fill_null(vis["access_count"], 0), 0)).as_py() or 0) if n else 0
    contradicted = sum(1 for s in vis["status"].to_pylist() if s == "contradicted")
    dup_rows, source = duplicates
    created = rows["created_at"]

    def grown(days: int) -> int:
        since = pa.scalar(now - timedelta(days=days), type=pa.timestamp("us", tz="UTC"))
        return int(pc.sum(pc.greater(created, since)).as_py() or 0) if total else 0

    shares = {
        "contradiction": _share(contradicted, n),
        "duplicate": _share(len(dup_rows), n),
        "stale": _share(stale, n),
        "low_confidence": _share(tiers["archive"], n),
    }
    score = float(np.clip(1.0 - sum(WEIGHTS[k] * v for k, v in shares.items()), 0.0, 1.0))
    return HealthReport(
        agent_id=agent_id,
        score=round(score, 6),
        total=total,
        visible=n,
        tiers=tiers,
        active_contradictions=active_contradictions,
        contradicted_share=shares["contradiction"],
        stale_count=stale,
        stale_share=shares["stale"],
        duplicate_cluster_ratio=shares["duplicate"],
        duplicate_source=source,
        never_recalled_share=_share(never, n),
        low_confidence_share=shares["low_confidence"],
        growth_7d=grown(7),
        growth_30d=grown(30),
        superseded_share=_share(int(superseded.sum()), total),
        archived_share=_share(int(archived.sum()), total),
        noise_count=noise,
        noise_share=_share(noise, n),
        next_archive_noise=next_archive[0],
        next_archive_faded=next_archive[1],
        at=now.isoformat(),
    )


def _active_contradictions(links: pa.Table, visible: dict[str, set[str]]) -> dict[str, int]:
    """Per agent, the unordered ``contradicts`` pairs of its links whose two rows it shows."""
    if links.num_rows == 0:
        return {}
    links = links.filter(pc.equal(links["rel"], "contradicts"))
    pairs: dict[str, set[tuple[str, str]]] = {}
    for agent, a, b in zip(
        links["agent_id"].to_pylist(), links["src_id"].to_pylist(), links["dst_id"].to_pylist(), strict=True
    ):
        shown = visible.get(agent, set())
        if a in shown and b in shown:
            pairs.setdefault(agent, set()).add((a, b) if a < b else (b, a))
    return {agent: len(p) for agent, p in pairs.items()}


def _duplicate_rows(
    store: MemoryStore, visible: dict[str, set[str]], plans: dict[str, PlanRecord], graph: Any
) -> dict[str, tuple[set[str], str]]:
    """Per agent, its visible rows in open merge clusters and where they come from: its latest plan if that
    is pending, else the merge band of its neighbour graph (computed here, for all such agents at once, when
    ``graph`` is not given and the agent is small enough), else none."""
    out: dict[str, tuple[set[str], str]] = {}
    for agent, shown in visible.items():
        plan = plans.get(agent)
        if plan is not None and plan.get("status") == "pending":
            ids: set[str] = set()
            for cluster in plan["body"].get("clusters", []):
                canonical = cluster.get("canonical")
                ids.add(canonical["id"] if isinstance(canonical, dict) else canonical)
                ids.update(m["id"] if isinstance(m, dict) else m for m in cluster.get("members", []))
            out[agent] = (ids & shown, "plan")
        elif graph is None and len(shown) > GRAPH_MAX_ROWS:
            out[agent] = (set(), "none")
    rest = [agent for agent in visible if agent not in out]
    if not rest:
        return out
    if graph is None:
        graph = agent_graph(store, rest[0] if len(rest) == 1 else rest)
    table = graph.to_arrow() if hasattr(graph, "to_arrow") else graph
    band = filter_bands(table, merge_band(store.settings))
    ends = set(band["src_id"].to_pylist()) | set(band["dst_id"].to_pylist())
    out.update({agent: (ends & visible[agent], "graph") for agent in rest})
    return out


def agent_confidences(store: MemoryStore, agent_id: str) -> np.ndarray:
    """Confidences of the agent's visible rows (for the histogram)."""
    from engram_pipeline.visibility import VISIBLE_SQL

    table = store.engine.scan(agent_id, columns=["confidence"], where=VISIBLE_SQL)
    return confidences(table["confidence"])


# Tier colours that read at a glance: green for the most trusted tier, fading through amber to grey.
TIER_COLOURS = {"hot": "#1a9850", "warm": "#91cf60", "cold": "#fdae61", "archive": "#a6a6a6"}


def tier_label(name: str) -> str:
    """``hot > 0.85``, ``warm 0.70-0.85``, ...: a tier and its confidence range (from ``CONFIDENCE_TIERS``)."""
    r = CONFIDENCE_TIERS[name]
    low, high = r.low, r.high
    if high >= 1.0:
        return f"{name} {'>=' if r.low_inclusive else '>'} {low:.2f}"
    if low <= 0.0:
        return f"{name} < {high:.2f}"
    return f"{name} {low:.2f}-{high:.2f}"


def render_health_chart(report: HealthReport, confidences: Any, path: str | Path) -> Path:
    """Write a PNG: visible memories per confidence tier (left, each bar labelled with its count) and the
    confidence histogram over the tier bands (right), with one legend naming each tier and its range."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise missing(exc, "the health chart") from None

    path = Path(path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    names = [t for t in CONFIDENCE_TIERS if t in report.tiers] or list(report.tiers)
    bars = left.bar(names, [report.tiers[t] for t in names], color=[TIER_COLOURS.get(t, "#999999") for t in names])
    left.bar_label(bars, padding=2)
    left.set_title(f"{report.agent_id}: memories per tier (health {report.score:.2f})")
    left.set_xlabel("confidence tier")
    left.set_ylabel("visible memories")
    left.margins(y=0.15)
    for name, r in CONFIDENCE_TIERS.items():
        right.axvspan(r.low, r.high, color=TIER_COLOURS[name], alpha=0.25, linewidth=0)
    right.hist(np.asarray(confidences, dtype=float), bins=20, range=(0.0, 1.0), color="#404040", alpha=0.85)
    right.set_xlim(0.0, 1.0)
    right.set_title("confidence of visible memories")
    right.set_xlabel("confidence")
    right.set_ylabel("memories")
    handles = [Patch(color=TIER_COLOURS[t], label=tier_label(t)) for t in CONFIDENCE_TIERS]  # best first
    right.legend(handles=handles, title="tiers", loc="upper left", fontsize="small")
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path


def health_chart(store: MemoryStore, agent_id: str, path: str | Path, *, now: datetime | None = None) -> HealthReport:
    """Compute :func:`health` and write its chart to ``path`` in one call; returns the report."""
    report = health(store, agent_id, now=now)
    render_health_chart(report, agent_confidences(store, agent_id), path)
    return report
