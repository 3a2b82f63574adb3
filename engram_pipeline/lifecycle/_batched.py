"""The skeleton every batched lifecycle pass runs, so that a pass states only what it decides.

A pass takes its cursor (:meth:`PassCursor.start`, from the pass function itself: that frame holds the lease),
decides its work as one polars frame (one row per unit of work, keyed by id), and hands the rest to
:func:`run_batched`:

1. seed the totals with what earlier, killed attempts of the run recorded (``cursor.counts``);
2. on a resumed run, count what the last killed attempt wrote after its last recorded batch (a commit that
   landed just before the kill), with the pass's :class:`Recount`, and record it in the cursor, so that the
   resumed run reports the whole run and a second kill does not lose it;
3. for each batch of ``size`` keys after the cursor, call the pass's ``write(batch)`` (the batch's compare-and-set
   commits) and advance the cursor with its counts;
4. finish the cursor (give the lease back) with the totals.

With a deferred cursor (:meth:`PassCursor.deferred`) and ``work`` given as a function that decides it, a run
whose work has no row to write (``writes``) commits nothing: no lease, no cursor. Otherwise the cursor begins
before the first batch, and the work is decided again under the lease if another run began meanwhile.

:func:`write_decided` is the batch step of the passes whose decision is per row: commit the decided frame at the
versions read, re-read the rows whose version moved, decide them again (a pure function of the fresh rows) and
commit once more; what moved again is ``skipped_concurrent_edit``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from engram_pipeline.lifecycle._common import PassCursor
from engram_pipeline.model import Memory

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore


@dataclass(frozen=True)
class Recount:
    """How a pass counts what a killed attempt of its run wrote without recording it.

    ``count(before, now)`` gets the agent's rows after the cursor (``columns``, plus ``id``) as they were when
    the last recorded batch ended and as they are now, and returns the counts of the writes in between that
    are this run's (say, rows stamped with the run's ``now``), and, for a pass that records them, those rows'
    outcomes (a :class:`BatchResult`)."""

    columns: Sequence[str]
    count: Callable[[pl.DataFrame, pl.DataFrame], Mapping[str, int] | BatchResult]


@dataclass(frozen=True)
class BatchResult:
    """A batch's counts, and (optionally) each row's outcome, kept in the cursor for the report; in a run over a
    set of agents (a sweep) also the counts split by agent (``by_agent``), kept in the cursor too."""

    counts: Mapping[str, int] = field(default_factory=dict)
    outcome: Mapping[str, str] = field(default_factory=dict)
    by_agent: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchedRun:
    counts: dict[str, int]  # the whole run's, killed attempts included
    cursor: dict[str, Any]  # the finished cursor's summary, as reports carry it
    outcome: dict[str, str]  # every row's outcome, when the pass records one
    by_agent: dict[str, dict[str, int]] = field(default_factory=dict)  # a sweep's counts per agent

    def agent_counts(self, agent_id: str, names: Iterable[str]) -> dict[str, int]:
        """One agent's counts (each of ``names``, 0 when the agent had none) in a run over a set of agents."""
        mine = self.by_agent.get(agent_id, {})
        return {name: int(mine.get(name, 0)) for name in names}


def run_batched(
    cursor: PassCursor,
    work: pl.DataFrame | Callable[[], pl.DataFrame],
    write: Callable[[pl.DataFrame], Mapping[str, int] | BatchResult],
    *,
    size: int,
    counts: Iterable[str],
    recount: Recount | None = None,
    key: str = "id",
    summary: Mapping[str, Any] | None = None,
    writes: pl.Expr | None = None,
) -> BatchedRun:
    """Run ``write`` over ``work`` in batches of ``size`` keys after the cursor; see the module docstring.

    ``counts`` names the report's counters (all start at 0); a ``processed`` counter counts the batch's rows
    unless ``write`` says otherwise. ``summary`` goes into the finished cursor. ``writes`` selects the rows of
    ``work`` that ``write`` would commit (default: a non-null ``action``, or every row without that column);
    when there is none, a deferred run's ``write`` is called once on all of it for the counts, outside the
    lease and without a cursor, and must commit nothing.

    A cursor over a set of agents (``cursor.agents``: a sweep) also keeps the counts per agent: ``work`` then
    has an ``agent_id`` column, ``write`` and ``recount`` return a :class:`BatchResult` with ``by_agent``
    (:func:`write_decided` does), and ``processed`` is split by the batch's ``agent_id``.
    """
    decide = work if callable(work) else None
    frame = work() if callable(work) else work
    if cursor.pending:
        if writes is None:
            writes = pl.col("action").is_not_null() if "action" in frame.columns else pl.lit(True)
        if frame.filter(writes).is_empty():
            return _idle(cursor, frame, write, counts, summary)
        cursor.begin()
        if cursor.stale and decide is not None:
            frame = decide()
    totals = dict.fromkeys(counts, 0)
    _add(totals, cursor.counts)
    outcome: dict[str, str] = dict(cursor.state.get("outcome", {}))
    per_agent = bool(cursor.agents)
    by_agent: dict[str, dict[str, int]] = {a: dict(c) for a, c in cursor.state.get("by_agent", {}).items()}
    if per_agent and "by_agent" not in cursor.state and len(cursor.agents) == 1:
        by_agent = {cursor.agents[0]: dict(cursor.counts)}  # a one-agent cursor saved without a split (older code)
    if recount is not None and (unrecorded := cursor.unrecorded(list(recount.columns))) is not None:
        counted = recount.count(*unrecorded)
        found = counted if isinstance(counted, BatchResult) else BatchResult(counted)
        if any(found.counts.values()) or found.outcome:
            outcome.update(found.outcome)
            cursor.state["outcome"] = outcome
            if per_agent:
                _add_by_agent(by_agent, found.by_agent)
                cursor.state["by_agent"] = by_agent
            cursor.record(**{k: int(v) for k, v in found.counts.items() if v})
            _add(totals, found.counts)
    todo = frame.sort(key)
    if cursor.after is not None:
        todo = todo.filter(pl.col(key) > cursor.after)
    for start in range(0, todo.height, size):
        batch = todo.slice(start, size)
        done = write(batch)
        result = done if isinstance(done, BatchResult) else BatchResult(done)
        batch_counts = dict(result.counts)
        if "processed" in totals:
            batch_counts.setdefault("processed", batch.height)
        if result.outcome:
            outcome.update(result.outcome)
            cursor.state["outcome"] = outcome
        if per_agent:
            _add_by_agent(by_agent, _split(batch, result, processed="processed" in totals))
            cursor.state["by_agent"] = by_agent
        cursor.advance(str(batch[key][-1]), **batch_counts)
        _add(totals, batch_counts)
    state = cursor.finish(**{f"total_{k}": v for k, v in totals.items()}, **(summary or {}))
    return BatchedRun(totals, state, outcome, by_agent)


def _idle(
    cursor: PassCursor,
    work: pl.DataFrame,
    write: Callable[[pl.DataFrame], Mapping[str, int] | BatchResult],
    counts: Iterable[str],
    summary: Mapping[str, Any] | None,
) -> BatchedRun:
    """A deferred run with nothing to write: the report a run would give, with no commit at all."""
    totals = dict.fromkeys(counts, 0)
    outcome: dict[str, str] = {}
    by_agent: dict[str, dict[str, int]] = {}
    if not work.is_empty():
        done = write(work)
        result = done if isinstance(done, BatchResult) else BatchResult(done)
        batch_counts = dict(result.counts)
        if "processed" in totals:
            batch_counts.setdefault("processed", work.height)
        _add(totals, batch_counts)
        outcome.update(result.outcome)
        if cursor.agents:
            by_agent = _split(work, result, processed="processed" in totals)
    state = cursor.finish(**{f"total_{k}": v for k, v in totals.items()}, **(summary or {}))
    return BatchedRun(totals, state, outcome, by_agent)


def _split(batch: pl.DataFrame, result: BatchResult, *, processed: bool) -> dict[str, dict[str, int]]:
    """A batch's counts per agent: the write's ``by_agent``, plus ``processed`` from the batch's ``agent_id``
    unless the write counted it."""
    out = {a: dict(c) for a, c in result.by_agent.items()}
    if processed and "processed" not in result.counts:
        for agent, n in batch.group_by("agent_id").len().iter_rows():
            out.setdefault(agent, {})["processed"] = int(n)
    return out


def _add_by_agent(into: dict[str, dict[str, int]], counts: Mapping[str, Mapping[str, int]]) -> None:
    for agent, agent_counts in counts.items():
        _add(into.setdefault(agent, {}), agent_counts)


@dataclass(frozen=True)
class Written:
    """What one commit of a decided frame did: the ids each counter counts, and the ids whose version moved."""

    applied: Mapping[str, Sequence[str]]
    missed: Sequence[str] = ()


def write_decided(
    store: MemoryStore,
    decided: pl.DataFrame,
    commit: Callable[[pl.DataFrame], Written],
    redecide: Callable[[list[Memory]], pl.DataFrame],
    *,
    record: Iterable[str] = (),
) -> BatchResult:
    """Commit ``decided`` (``commit`` writes it through the batched compare-and-set at the versions read); re-read
    the rows that missed, ``redecide`` them and commit once more. Returns the counts, ``skipped_concurrent_edit``
    being the rows that moved again or vanished, and, as each row's outcome, the ids counted by the counters
    named in ``record``. When ``decided`` has an ``agent_id`` column (rows of several agents, a sweep), the
    counts are also split by agent (``by_agent``)."""
    keep = set(record)
    counts: dict[str, int] = {}
    outcome: dict[str, str] = {}
    by_agent: dict[str, dict[str, int]] = {}
    agent_of = dict(zip(decided["id"], decided["agent_id"], strict=True)) if "agent_id" in decided.columns else None

    def tally(name: str, ids: Sequence[str]) -> None:
        counts[name] = counts.get(name, 0) + len(ids)
        if name in keep:
            outcome.update(dict.fromkeys(ids, name))
        if agent_of is not None:
            for i in ids:
                mine = by_agent.setdefault(agent_of[i], {})
                mine[name] = mine.get(name, 0) + 1

    first = commit(decided)
    for name, ids in first.applied.items():
        tally(name, ids)
    skipped: list[str] = []
    if first.missed:
        fresh = store.get_many(list(first.missed))
        found = {r["id"] for r in fresh}
        skipped = [i for i in first.missed if i not in found]
        if fresh:
            second = commit(redecide(fresh))
            for name, ids in second.applied.items():
                tally(name, ids)
            skipped += list(second.missed)
    tally("skipped_concurrent_edit", skipped)
    return BatchResult(counts, outcome, by_agent)


def count_frames(frames: Mapping[str, pl.DataFrame]) -> BatchResult:
    """Counts from frames of counted rows (say ``{"pruned": rows, "updated": rows}``): each its height, and split
    by the rows' ``agent_id`` where the frame has one (a recount in a sweep)."""
    counts = {name: frame.height for name, frame in frames.items()}
    by_agent: dict[str, dict[str, int]] = {}
    for name, frame in frames.items():
        if "agent_id" in frame.columns:
            for agent, n in frame.group_by("agent_id").len().iter_rows():
                by_agent.setdefault(agent, {})[name] = int(n)
    return BatchResult(counts, by_agent=by_agent)


def _add(totals: dict[str, int], counts: Mapping[str, int]) -> None:
    for k, v in counts.items():
        totals[k] = totals.get(k, 0) + int(v)
