"""Health of one agent's memory: a score in [0, 1], the tier distribution and the signals behind the score.

Shares are over the agent's *visible* rows (what default recall shows: not superseded, not archived), except
``superseded_share`` and ``archived_share``, which are over every row. The score::

    score = clip(1 - 0.35 * contradiction_share      visible rows with status ``contradicted``
                   - 0.25 * duplicate_cluster_ratio  visible rows in open merge clusters
                   - 0.20 * stale_share              visible rows not accessed (else created) in 30 days
                   - 0.20 * low_confidence_share,    visible rows in the ``archive`` tier (confidence < 0.40)
                 0, 1)

so a corpus without contradictions, duplicates, stale or doubtful rows scores 1 and one made only of them
scores 0; an empty agent scores 1. Open merge clusters are the members of the agent's latest *pending*
corpus-merge plan (``duplicate_source = "plan"``); without one, the rows in a pair of the merge band
``[MEMORY_CONSOLIDATION_MERGE_THRESHOLD, MEMORY_DUPLICATE_THRESHOLD)`` of the neighbour graph when ``graph``
is given or the agent has at most ``GRAPH_MAX_ROWS`` visible rows (``"graph"``); else 0 (``"none"``).

:func:`render_health_chart` draws the tier distribution and the confidence histogram to a PNG (matplotlib,
Agg backend: no display needed); :func:`health_chart` does both in one call.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.model import CONFIDENCE_TIERS, confidence_tier, utcnow
from engram_pipeline.similarity.bands import filter_bands, merge_band
from engram_pipeline.store.access_log import overlay_pending

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

STALE_DAYS = 30
GRAPH_MAX_ROWS = 20_000
WEIGHTS = {"contradiction": 0.35, "duplicate": 0.25, "stale": 0.20, "low_confidence": 0.20}
_COLUMNS = [
    "id", "version", "status", "superseded_by", "confidence", "access_count", "created_at", "last_accessed_at",
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
    at: str
    weights: dict[str, float] = field(default_factory=lambda: dict(WEIGHTS))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def health(store: MemoryStore, agent_id: str, *, now: datetime | None = None, graph: Any = None) -> HealthReport:
    """The health report of ``agent_id`` at ``now``; see the module docstring for the score."""
    now = now or utcnow()
    rows = overlay_pending(store.scan(agent_id, columns=_COLUMNS), store.pending_access(agent_id))  # read-only
    total = rows.num_rows
    status = rows["status"].to_pylist()
    hidden_by = pc.is_valid(rows["superseded_by"]).to_numpy(zero_copy_only=False)
    st = np.array(status, dtype=object)
    superseded = (st == "superseded") | hidden_by
    archived = (st == "archived") & ~superseded
    visible = ~superseded & ~archived
    vis = rows.filter(pa.array(visible))
    n = vis.num_rows
    conf = pc.fill_null(vis["confidence"], 0.5).to_numpy(zero_copy_only=False)
    tiers = {t: 0 for t in CONFIDENCE_TIERS}
    for c in conf:
        tiers[confidence_tier(float(c))] += 1
    cut = pa.scalar(now - timedelta(days=STALE_DAYS), type=pa.timestamp("us", tz="UTC"))
    last = pc.coalesce(vis["last_accessed_at"], vis["created_at"])
    stale = int(pc.sum(pc.less(last, cut)).as_py() or 0) if n else 0
    never = int(pc.sum(pc.equal(pc.fill_null(vis["access_count"], 0), 0)).as_py() or 0) if n else 0
    contradicted = sum(1 for s in vis["status"].to_pylist() if s == "contradicted")
    visible_ids = set(vis["id"].to_pylist())
    dup_rows, source = _duplicate_rows(store, agent_id, visible_ids, graph)
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
        active_contradictions=_active_contradictions(store, agent_id, visible_ids),
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
        at=now.isoformat(),
    )


def _active_contradictions(store: MemoryStore, agent_id: str, visible: set[str]) -> int:
    links = store.links_for_agent(agent_id)
    if links.num_rows == 0:
        return 0
    links = links.filter(pc.equal(links["rel"], "contradicts"))
    pairs = {
        tuple(sorted((a, b)))
        for a, b in zip(links["src_id"].to_pylist(), links["dst_id"].to_pylist(), strict=True)
        if a in visible and b in visible
    }
    return len(pairs)


def _duplicate_rows(store: MemoryStore, agent_id: str, visible: set[str], graph: Any) -> tuple[set[str], str]:
    plan = store.latest_plan(agent_id)
    if plan is not None and plan.get("status") == "pending":
        ids: set[str] = set()
        for cluster in plan["body"].get("clusters", []):
            canonical = cluster.get("canonical")
            ids.add(canonical["id"] if isinstance(canonical, dict) else canonical)
            ids.update(m["id"] if isinstance(m, dict) else m for m in cluster.get("members", []))
        return ids & visible, "plan"
    if graph is None and len(visible) > GRAPH_MAX_ROWS:
        return set(), "none"
    if graph is None:
        from engram_pipeline.lifecycle.confidence import default_graph

        graph = default_graph(store, agent_id, floor=store.settings.merge_threshold)
    table = graph.to_arrow() if hasattr(graph, "to_arrow") else graph
    band = filter_bands(table, merge_band(store.settings))
    ends = set(band["src_id"].to_pylist()) | set(band["dst_id"].to_pylist())
    return ends & visible, "graph"


def agent_confidences(store: MemoryStore, agent_id: str) -> np.ndarray:
    """Confidences of the agent's visible rows (for the histogram)."""
    from engram_pipeline.lifecycle.confidence import VISIBLE

    table = store.scan(agent_id, columns=["confidence"], where=VISIBLE)
    return pc.fill_null(table["confidence"], 0.5).to_numpy(zero_copy_only=False).astype(float)


def render_health_chart(report: HealthReport, confidences: Any, path: str | Path) -> Path:
    """Write a PNG: tier distribution bars (left) and the confidence histogram with tier bounds (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    names = list(report.tiers)
    colours = {"hot": "#d62728", "warm": "#ff7f0e", "cold": "#1f77b4", "archive": "#7f7f7f"}
    left.bar(names, [report.tiers[t] for t in names], color=[colours.get(t, "#999999") for t in names])
    left.set_title(f"{report.agent_id}: tiers (health {report.score:.2f})")
    left.set_ylabel("visible memories")
    right.hist(np.asarray(confidences, dtype=float), bins=20, range=(0.0, 1.0), color="#1f77b4")
    for bound in (0.40, 0.70, 0.85):
        right.axvline(bound, color="#444444", linestyle="--", linewidth=0.8)
    right.set_title("confidence")
    right.set_xlabel("confidence")
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path


def health_chart(store: MemoryStore, agent_id: str, path: str | Path, *, now: datetime | None = None) -> HealthReport:
    """Compute :func:`health` and write its chart to ``path`` in one call; returns the report."""
    report = health(store, agent_id, now=now)
    render_health_chart(report, agent_confidences(store, agent_id), path)
    return report
