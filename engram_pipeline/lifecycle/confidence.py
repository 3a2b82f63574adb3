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
``signal`` policy and ``safe`` only rows a visible derived row or a merge canonical holds (noise is archival's);
under ``seed`` any): status ``archived``, audited with the full pre-image, hidden from default recall,
restorable. The others keep decaying in place: a lower confidence lowers their tier, not their visibility.
Only visible rows take part (not superseded, not archived), as decayers and as competitors.

The pass is vectorized (one ``bincount`` over the graph's edges), writes in batches of
``MEMORY_DECAY_BATCH_SIZE`` through the store's compare-and-set, and keeps a :class:`PassCursor`; a killed
run resumes with the same ``now`` and decides from the rows and the graph as they were when the run began, so
its competition terms are those of an uninterrupted run (rows it had already written have moved on and are not
written again), and it reports the whole run, counting what the killed attempt wrote after its last recorded
batch.

A sweep (:func:`confidence_sweep`) decays the rows of a set of agents of one shard in one run: one read of
their rows, each agent's neighbour graph computed on its own rows inside the sweep (competition never spans
agents), one vectorised decision over all of them, batches spanning agents, one cursor per shard.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.lifecycle._batched import BatchResult, Recount, Written, count_frames, run_batched, write_decided
from engram_pipeline.lifecycle._common import PassCursor, sweep_key
from engram_pipeline.lifecycle.graph import agent_graph
from engram_pipeline.lifecycle.retention import Holders, holders
from engram_pipeline.model import Memory, confidence_of, confidences
from engram_pipeline.settings import Settings
from engram_pipeline.visibility import VISIBLE_SQL, is_visible

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

PASS = "confidence_decay"
ACTOR = "confidence_decay"
_DAY_US = 86_400e6
_COLUMNS = ["id", "agent_id", "version", "confidence", "pinned", "decayed_at", "created_at"]
COUNTS = ("decayed", "archived", "skipped_concurrent_edit")


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
    batch_size: int | None = None,
) -> ConfidenceDecayReport:
    """Decay the confidence of one agent's visible rows up to ``now``; archive what fell below the floor.

    ``graph`` is a precomputed neighbour table (``src_id``, ``dst_id``, ``score``); without it the agent's
    graph is built (:func:`~engram_pipeline.lifecycle.graph.agent_graph`). Writes in batches of
    ``batch_size`` rows (default ``MEMORY_DECAY_BATCH_SIZE``). Returns counts; see the module docstring. The
    sweep of one agent.
    """
    reports = confidence_sweep(store, [agent_id], graph=graph, now=now, run_id=run_id, batch_size=batch_size)
    return reports[agent_id]


def confidence_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    graph: Any = None,
    now: datetime | None = None,
    run_id: str | None = None,
    batch_size: int | None = None,
) -> dict[str, ConfidenceDecayReport]:
    """:func:`decay_confidence` over every agent of ``agent_ids`` (all of one shard) in one columnar run;
    ``graph``, if given, holds the pairs of all of them (each agent's graph, concatenated)."""
    agents = sorted(set(agent_ids))
    if not agents:
        return {}
    s = store.settings
    key, scope = sweep_key(agents, s.shards)
    cursor = PassCursor.deferred(store, PASS, key, now=now, run_id=run_id, scope=scope, agents=agents)
    now = cursor.now
    held = holders(store, agents)
    read: dict[str, Any] = {"graph": graph}

    def work() -> pl.DataFrame:
        # A resumed run decides from the rows as the run began (competition is computed once per run from the
        # confidences read at its start): rows its killed attempt already wrote have moved on and are skipped.
        start = cursor.at_start(_COLUMNS, VISIBLE_SQL)
        frame = start if start is not None else store.engine.scan_agents(agents, columns=_COLUMNS, where=VISIBLE_SQL)
        frame = frame.sort_by("id")
        graph = read["graph"] if not cursor.stale else None  # decided again: the rows moved since that graph
        if graph is None and frame.num_rows > 1:
            graph = agent_graph(store, agents, version=None if start is None else cursor.started_version)
        read.update(frame=frame, graph=graph)
        ids = frame["id"].combine_chunks()
        plan = plan_decay(
            frame,
            graph,
            now=now,
            rate=s.confidence_decay_rate,
            min_similarity=s.competition_min_similarity,
            archive_floor=s.archive_confidence,
            archivable=held.archivable_mask(ids.to_pylist()),
        )
        return pl.DataFrame(
            {
                "id": ids.to_pylist(),
                "agent_id": frame["agent_id"].to_pylist(),
                "version": frame["version"].to_numpy(),
                "confidence": plan.confidence,
                "competition": plan.competition,
                "pinned": plan.pinned,
                "archive": plan.archive,
            }
        ).filter(pl.Series(plan.due | plan.archive))

    commit = partial(_commit, store, now=now, run_id=cursor.run_id)
    redecide = partial(_redecide, now=now, settings=s, held=held)
    run = run_batched(
        cursor,
        work,
        lambda batch: write_decided(store, batch, commit, lambda fresh: redecide(fresh, batch)),
        size=batch_size or s.decay_batch_size,
        counts=COUNTS,
        recount=Recount(["agent_id", "decayed_at", "status", "pinned"], partial(_unrecorded_counts, now=now)),
    )
    processed = Counter(read["frame"]["agent_id"].to_pylist())
    out = {}
    for agent in agents:
        c = run.agent_counts(agent, COUNTS)
        out[agent] = ConfidenceDecayReport(
            c["decayed"], c["archived"], c["skipped_concurrent_edit"], processed[agent], run.cursor
        )
    return out


def _commit(store: MemoryStore, decided: pl.DataFrame, *, now: datetime, run_id: str) -> Written:
    """Write one decided batch at the versions read: the new confidences, then the archived rows (audited)."""
    cols = ["id", "version", "confidence"]
    plain = decided.filter(~pl.col("archive"))
    gone = decided.filter(pl.col("archive"))
    kept = store.engine.cas_write(
        plain.select(cols).with_columns(decayed_at=pl.lit(now)).to_dicts(),
        actor=ACTOR,
        action="decay_confidence",
        run_id=run_id,
    )
    archived = store.engine.cas_write(
        gone.select(cols).with_columns(decayed_at=pl.lit(now), status=pl.lit("archived")).to_dicts(),
        actor=ACTOR,
        action="archive",
        run_id=run_id,
        audit=True,
    )
    pinned = set(plain.filter(pl.col("pinned"))["id"].to_list())  # their decayed_at moves, not their confidence
    return Written(
        {"decayed": [i for i in kept.applied if i not in pinned], "archived": archived.applied},
        missed=[*kept.skipped_concurrent_edit, *archived.skipped_concurrent_edit],
    )


def _redecide(
    fresh: list[Memory], batch: pl.DataFrame, *, now: datetime, settings: Settings, held: Holders
) -> pl.DataFrame:
    """Re-read rows decided again with the competition this run computed for them: a row that is hidden now,
    or already decayed up to ``now``, is left out."""
    comp = dict(zip(batch["id"].to_list(), batch["competition"].to_list(), strict=True))
    rows = []
    for r in fresh:
        change = _fresh_change(r, comp.get(r["id"], 0.0), now, settings.confidence_decay_rate)
        if change is None:
            continue
        pinned = bool(r.get("pinned"))
        goes = not pinned and change["confidence"] < settings.archive_confidence and held.may_archive(r["id"])
        rows.append(
            {"id": r["id"], "agent_id": r["agent_id"], "version": r["version"], "confidence": change["confidence"],
             "competition": comp.get(r["id"], 0.0), "pinned": pinned, "archive": goes}
        )  # fmt: skip
    return pl.DataFrame(rows, schema=batch.schema)


def _unrecorded_counts(before: pl.DataFrame, after: pl.DataFrame, *, now: datetime) -> BatchResult:
    """What killed attempts of this run wrote after its last recorded batch (see ``PassCursor.unrecorded``):
    rows it decayed or archived carry ``decayed_at = now``; pinned rows only advance it."""
    was = before.select("id", pl.col("decayed_at").alias("was_at"), pl.col("status").alias("was"))
    written = after.join(was, on="id").filter(
        (pl.col("decayed_at") == pl.lit(now)) & pl.col("was_at").ne_missing(pl.lit(now))
    )
    archived = written.filter((pl.col("status") == "archived") & (pl.col("was") != "archived"))
    decayed = written.filter((pl.col("status") != "archived") & ~pl.col("pinned").fill_null(False))
    return count_frames({"decayed": decayed, "archived": archived})


def _fresh_change(row: Memory, comp: float, now: datetime, rate: float) -> dict[str, Any] | None:
    """The decay change of one re-read row (after a compare-and-set miss), or None if nothing is due."""
    if not is_visible(row):
        return None
    ref = row.get("decayed_at") or row.get("created_at") or now
    elapsed = max(0.0, (now - ref).total_seconds() / 86_400.0)
    if elapsed <= 0:
        return None
    conf = confidence_of(row)
    if not row.get("pinned"):
        conf = float(decayed(np.array([conf]), np.array([comp]), np.array([elapsed]), rate=rate)[0])
    return {"id": row["id"], "version": row["version"], "confidence": conf, "decayed_at": now}
