"""Competition-aware confidence decay: memories in crowded neighbourhoods fade faster, unique ones slower.

Per day, a memory's confidence becomes ``conf * (1 - rate * m)`` with ``m = 1 + competition`` and::

    competition = sum_j max(0, conf_j - conf) * sim_j / (1 + conf)

over its neighbours ``j`` in the neighbour graph with ``sim_j >= ENGRAM_COMPETITION_MIN_SIMILARITY``: only
*more* confident look-alikes compete, and a confident memory is hurt less by them. ``rate`` is
``ENGRAM_CONFIDENCE_DECAY_RATE`` (per day).

Time consistency
----------------
A run applies the continuous form for the time elapsed since the row's ``decayed_at`` (else ``created_at``)::

    new = conf * max(0, 1 - rate * m) ** elapsed_days

then sets ``decayed_at = now``. The competition term is computed once per run from the confidences read at
its start and held fixed for the whole elapsed interval ("a fixed neighbourhood"). With a fixed ``m`` the
powers compose exactly, so 24 hourly runs give the confidence of one run after a day (to float rounding);
when neighbours' confidences move between runs, ``m`` moves with them and the two schedules differ by a
second-order term (``rate * elapsed * delta m``). A second run at the same instant finds ``elapsed == 0`` and
writes nothing. Pinned rows keep their confidence; their ``decayed_at`` still advances, so unpinning a row
does not charge it for the time it was pinned.

Rows whose new confidence falls below ``ENGRAM_ARCHIVE_CONFIDENCE`` (and are not pinned) are archived in the
same run when the retention policy lets them go (:mod:`engram_pipeline.lifecycle.retention`: under the default
``safe`` policy only rows a visible derived row or a merge canonical holds; under ``seed`` any): status
``archived``, audited with the full pre-image, hidden from default recall, restorable. The others keep
decaying in place: a lower confidence lowers their tier, not their visibility.
Only visible rows take part (not superseded, not archived), as decayers and as competitors.

The pass is vectorized (one ``bincount`` over the graph's edges), writes in batches of
``MEMORY_DECAY_BATCH_SIZE`` through the store's compare-and-set, and keeps a :class:`PassCursor`; a killed
run resumes with the same ``now`` and recomputes competition from the confidences it then reads (rows it had
already written have ``elapsed == 0`` and are not written again).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.lifecycle._common import PassCursor
from engram_pipeline.lifecycle.retention import holders
from engram_pipeline.model import Memory, confidence_of, confidences
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

PASS = "confidence_decay"
ACTOR = "confidence_decay"
# Rows a pass may change: visible ones (a hidden row neither decays nor competes).
VISIBLE = VISIBLE_SQL
_DAY_US = 86_400e6
_COLUMNS = ["id", "version", "confidence", "pinned", "decayed_at", "created_at"]


@dataclass(frozen=True)
class ConfidenceDecayReport:
    decayed_count: int
    archived_count: int
    skipped_concurrent_edit: int
    processed: int
    cursor: dict[str, Any] = field(default_factory=dict)


def graph_indices(ids: pa.Array | pa.ChunkedArray, graph: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions in ``ids`` of each edge's two ends and its score; edges with an end outside ``ids`` dropped.

    ``graph`` is a neighbour table (``src_id``, ``dst_id``, ``score``) as Arrow or polars.
    """
    table = graph.to_arrow() if hasattr(graph, "to_arrow") else graph
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    m = table.num_rows
    # one lookup over both ends: the hash table of ``ids`` is built once
    ends = pa.chunked_array(
        table["src_id"].cast(pa.string()).chunks + table["dst_id"].cast(pa.string()).chunks, type=pa.string()
    )
    pos = pc.fill_null(pc.index_in(ends, value_set=ids), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    i, j = pos[:m], pos[m:]
    keep = (i >= 0) & (j >= 0)
    s = table["score"].to_numpy().astype(np.float64)
    return i[keep], j[keep], s[keep]


def competition(
    conf: np.ndarray, i: np.ndarray, j: np.ndarray, sim: np.ndarray, *, min_similarity: float
) -> np.ndarray:
    """``sum_j max(0, conf_j - conf_i) * sim_ij / (1 + conf_i)`` for every row, over undirected edges."""
    keep = (sim >= min_similarity) & (i != j)
    i, j, sim = i[keep], j[keep], sim[keep]
    diff = conf[j] - conf[i]
    n = conf.shape[0]
    # each undirected edge pushes on its less confident end only
    total = np.bincount(i, weights=np.maximum(diff, 0.0) * sim, minlength=n)
    total += np.bincount(j, weights=np.maximum(-diff, 0.0) * sim, minlength=n)
    return total / (1.0 + conf)


def decayed(conf: np.ndarray, comp: np.ndarray, elapsed_days: np.ndarray, *, rate: float) -> np.ndarray:
    """``conf * max(0, 1 - rate * (1 + comp)) ** elapsed_days``, clipped to [0, 1]."""
    base = np.clip(1.0 - rate * (1.0 + comp), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        out = conf * np.power(base, elapsed_days)
    return np.clip(out, 0.0, 1.0)


def _micros(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Timestamps as int64 microseconds since the epoch (nulls as the minimum int64)."""
    arr = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return pc.fill_null(arr, np.iinfo(np.int64).min).to_numpy(zero_copy_only=False)


def _to_us(ts: datetime) -> int:
    return int(ts.astimezone(UTC).timestamp() * 1_000_000)


def default_graph(store: MemoryStore, agent_id: str, ids: pa.Array | None = None, *, floor: float) -> Any:
    """The agent's neighbour graph: ``lifecycle.graph.agent_graph`` when that module exists, else the
    similarity module's ``neighbour_graph`` over the agent's visible rows (pairs with score >= ``floor``)."""
    try:
        module = importlib.import_module("engram_pipeline.lifecycle.graph")
    except ImportError:
        module = None
    if module is not None and hasattr(module, "agent_graph"):
        return module.agent_graph(store, agent_id)
    from engram_pipeline.similarity import neighbour_graph

    table = store.scan(agent_id, columns=["id", "vector"], where=VISIBLE)
    if ids is not None:
        table = table.filter(pc.is_in(table["id"], value_set=ids))
    if table.num_rows < 2:
        return pa.table(
            {
                "src_id": pa.array([], pa.string()),
                "dst_id": pa.array([], pa.string()),
                "score": pa.array([], pa.float32()),
            }
        )
    dim = store.embedder.dimension
    flat = table["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
    vectors = np.asarray(flat, dtype=np.float32).reshape(-1, dim)
    return neighbour_graph(table["id"], vectors, floor=floor)


@dataclass(frozen=True)
class DecayPlan:
    """What a decay run would write, row by row (arrays aligned with the input frame)."""

    confidence: np.ndarray  # new confidence
    competition: np.ndarray
    elapsed_days: np.ndarray
    pinned: np.ndarray
    due: np.ndarray  # elapsed > 0: a write is due (pinned rows only advance decayed_at)
    archive: np.ndarray  # falls below the archive floor (never pinned)


def plan_decay(
    frame: pa.Table,
    graph: Any,
    *,
    now: datetime,
    rate: float,
    min_similarity: float,
    archive_floor: float,
    archivable: np.ndarray | None = None,
) -> DecayPlan:
    """The vectorized core of :func:`decay_confidence`, without the store: ``frame`` has ``id``,
    ``confidence``, ``pinned``, ``decayed_at`` and ``created_at``; ``graph`` a neighbour table or None;
    ``archivable`` (aligned with ``frame``) the rows the retention policy lets go (default: all)."""
    ids = frame["id"].combine_chunks()
    n = frame.num_rows
    conf = confidences(frame["confidence"])
    comp = np.zeros(n)
    if graph is not None and n > 1:
        i, j, sim = graph_indices(ids, graph)
        comp = competition(conf, i, j, sim, min_similarity=min_similarity)
    ref = _micros(frame["decayed_at"])
    ref = np.where(ref == np.iinfo(np.int64).min, _micros(frame["created_at"]), ref)
    elapsed = np.clip((_to_us(now) - ref) / _DAY_US, 0.0, None)
    pinned = pc.fill_null(frame["pinned"], False).to_numpy(zero_copy_only=False).astype(bool)
    new = np.where(pinned, conf, decayed(conf, comp, elapsed, rate=rate))
    archive = ~pinned & (new < archive_floor)
    if archivable is not None:
        archive &= archivable
    return DecayPlan(new, comp, elapsed, pinned, elapsed > 0, archive)


def decay_confidence(
    store: MemoryStore,
    agent_id: str,
    *,
    graph: Any = None,
    now: datetime | None = None,
    run_id: str | None = None,
) -> ConfidenceDecayReport:
    """Decay the confidence of one agent's visible rows up to ``now``; archive what fell below the floor.

    ``graph`` is a precomputed neighbour table (``src_id``, ``dst_id``, ``score``); without it the agent's
    graph is built (see :func:`default_graph`). Returns counts; see the module docstring for the rule.
    """
    s = store.settings
    cursor = PassCursor.start(store, PASS, agent_id, now=now, run_id=run_id)
    now = cursor.now
    frame = store.scan(agent_id, columns=_COLUMNS, where=VISIBLE).sort_by("id")
    ids = frame["id"].combine_chunks()
    n = frame.num_rows
    if graph is None and n > 1:
        graph = default_graph(store, agent_id, ids, floor=s.competition_min_similarity)
    held = holders(store, agent_id)
    plan = plan_decay(
        frame,
        graph,
        now=now,
        rate=s.confidence_decay_rate,
        min_similarity=s.competition_min_similarity,
        archive_floor=s.archive_confidence,
        archivable=held.archivable_mask(ids.to_pylist()),
    )
    new, comp, pinned, archive = plan.confidence, plan.competition, plan.pinned, plan.archive
    todo = plan.due | archive

    id_list = ids.to_pylist()
    versions = frame["version"].to_numpy()
    comp_of = {id_list[k]: float(comp[k]) for k in np.flatnonzero(todo)}

    def recompute(archiving: bool) -> Any:
        def redo(rows: list[Memory]) -> list[dict[str, Any]]:
            out = []
            for r in rows:
                change = _fresh_change(r, comp_of.get(r["id"], 0.0), now, s.confidence_decay_rate)
                if change is None:
                    continue
                goes = not r["pinned"] and change["confidence"] < s.archive_confidence and held.may_archive(r["id"])
                if goes != archiving:
                    continue  # the other write's business: left for the next run
                if archiving:
                    change["status"] = "archived"
                out.append(change)
            return out

        return redo

    counts = cursor.counts
    decayed_n, archived_n, skipped = counts.get("decayed", 0), counts.get("archived", 0), counts.get("skipped", 0)
    after = cursor.after
    positions = np.flatnonzero(todo)
    if after is not None:
        positions = positions[np.array([id_list[k] > after for k in positions], dtype=bool)]
    batch = s.decay_batch_size
    for start in range(0, positions.size, batch):
        chunk = positions[start : start + batch]
        plain, gone = [], []
        for k in chunk:
            change = {"id": id_list[k], "version": int(versions[k]), "confidence": float(new[k]), "decayed_at": now}
            if archive[k]:
                gone.append({**change, "status": "archived"})
            else:
                plain.append(change)
        r1 = store.cas_write(
            plain, recompute=recompute(False), actor=ACTOR, action="decay_confidence", run_id=cursor.run_id
        )
        r2 = store.cas_write(
            gone, recompute=recompute(True), actor=ACTOR, action="archive", run_id=cursor.run_id, audit=True
        )
        pinned_ids = {id_list[k] for k in chunk if pinned[k]}
        d = sum(1 for x in r1.applied if x not in pinned_ids)
        decayed_n, archived_n = decayed_n + d, archived_n + len(r2.applied)
        skipped += len(r1.skipped_concurrent_edit) + len(r2.skipped_concurrent_edit)
        cursor.advance(
            id_list[chunk[-1]],
            decayed=d,
            archived=len(r2.applied),
            skipped=len(r1.skipped_concurrent_edit) + len(r2.skipped_concurrent_edit),
        )
    summary = cursor.finish(processed=n)
    return ConfidenceDecayReport(decayed_n, archived_n, skipped, n, summary)


def _fresh_change(row: Memory, comp: float, now: datetime, rate: float) -> dict[str, Any] | None:
    """The decay change of one re-read row (after a compare-and-set miss), or None if nothing is due."""
    if row["status"] in ("superseded", "archived") or row.get("superseded_by"):
        return None
    ref = row.get("decayed_at") or row.get("created_at") or now
    elapsed = max(0.0, (now - ref).total_seconds() / 86_400.0)
    if elapsed <= 0:
        return None
    conf = confidence_of(row)
    if not row.get("pinned"):
        conf = float(decayed(np.array([conf]), np.array([comp]), np.array([elapsed]), rate=rate)[0])
    return {"id": row["id"], "version": row["version"], "confidence": conf, "decayed_at": now}
