"""Consolidation stage 5: archive what faded (confidence below ``ENGRAM_ARCHIVE_CONFIDENCE``, default 0.40)
and what the retention policy lets go (:mod:`engram_pipeline.lifecycle.retention`): under ``safe`` only rows
whose content a visible derived belief, procedure or schema (``derived-from``) or a merge canonical holds, so an
episode is archived only after the earlier stages consolidated it; under ``seed`` any. Under the default
``signal`` policy, what ``safe`` lets go and, whatever its confidence, the noise the noise rule takes
(:func:`~engram_pipeline.lifecycle.retention.forgettable`: noise by its information score, older than
``ENGRAM_NOISE_ARCHIVE_AFTER_DAYS``, never recalled). :func:`candidates` lists both, with the reason; health
reports it as what the next pass would archive.

Archiving is soft: status ``archived`` (hidden from default recall, returned with ``include_archived``),
written through the compare-and-set with an audited pre-image so that ``store.restore(id)`` brings the row
back as it was. Pinned rows and hidden rows (superseded, already archived) are left alone. A row edited
concurrently is re-read once; if it still qualifies it is archived, else it is left (``unchanged``). The pass
keeps its own cursor: a killed run resumes after its last committed batch and reports the whole run. A sweep
(:func:`archival_sweep`) archives for a set of agents of one shard in one run: one read, batches spanning
agents, one cursor per shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import polars as pl

from engram_pipeline.lifecycle._batched import BatchResult, Recount, Written, count_frames, run_batched, write_decided
from engram_pipeline.lifecycle._common import CONSOLIDATION_ACTOR, PassCursor, agent_frame, sweep_key
from engram_pipeline.lifecycle.retention import Holders, forgettable, holders
from engram_pipeline.model import Memory, confidence_of, utcnow
from engram_pipeline.visibility import VISIBLE_SQL, is_visible

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

ACTOR = CONSOLIDATION_ACTOR
PASS_NAME = "archival"
COUNTS = ("processed", "archived", "skipped_concurrent_edit")


@dataclass(frozen=True)
class ArchivalReport:
    candidates: int
    archived: int
    skipped_concurrent_edit: int
    archived_ids: tuple[str, ...] = ()
    cursor: dict[str, Any] = field(default_factory=dict)


def archive_faded(
    store: MemoryStore,
    agent_id: str,
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    batch_size: int | None = None,
) -> ArchivalReport:
    """Archive the agent's visible, unpinned rows whose confidence is below the archive floor, in batches of
    ``batch_size`` (default ``MEMORY_DECAY_BATCH_SIZE``); a killed run resumes from its cursor. The sweep of
    one agent."""
    return archival_sweep(store, [agent_id], now=now, run_id=run_id, batch_size=batch_size)[agent_id]


def archival_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    batch_size: int | None = None,
) -> dict[str, ArchivalReport]:
    """:func:`archive_faded` over every agent of ``agent_ids`` (all of one shard) in one columnar run."""
    agents = sorted(set(agent_ids))
    if not agents:
        return {}
    floor = float(store.settings.archive_confidence)
    key, scope = sweep_key(agents, store.settings.shards)
    cursor = PassCursor.deferred(store, PASS_NAME, key, now=now, run_id=run_id, scope=scope, agents=agents)
    now = cursor.now
    held = holders(store, agents)
    cutoff = now - timedelta(days=store.settings.noise_archive_after_days)
    commit = partial(_commit, store, now=now, run_id=cursor.run_id)
    redecide = partial(_redecide, floor=floor, held=held, cutoff=cutoff)
    run = run_batched(
        cursor,
        lambda: candidates(store, agents, now=now, held=held).select("id", "agent_id", "version"),
        lambda batch: write_decided(store, batch, commit, redecide, record=["archived"]),
        size=batch_size or store.settings.decay_batch_size,
        counts=COUNTS,
        recount=Recount(["agent_id", "status", "updated_at"], partial(_unrecorded_counts, now=now)),
    )
    done = sorted(i for i, what in run.outcome.items() if what == "archived")
    owner = {r["id"]: r["agent_id"] for r in store.get_many(done, columns=["id", "agent_id"])}
    out = {}
    for agent in agents:
        c = run.agent_counts(agent, COUNTS)
        archived = tuple(i for i in done if owner.get(i) == agent)
        out[agent] = ArchivalReport(c["processed"], c["archived"], c["skipped_concurrent_edit"], archived, run.cursor)
    return out


def candidates(
    store: MemoryStore, agent_ids: Sequence[str], *, now: datetime | None = None, held: Holders | None = None
) -> pl.DataFrame:
    """What archival would archive at ``now``: ``id``, ``agent_id``, ``version`` and ``reason`` (``faded``:
    confidence below the floor and let go by the policy; ``noise``: the noise rule), sorted by id."""
    now = now or utcnow()
    held = held or holders(store, agent_ids)
    floor = float(store.settings.archive_confidence)
    where = f"{VISIBLE_SQL} AND (pinned IS NULL OR NOT pinned) AND confidence < {floor!r}"
    found = agent_frame(store, agent_ids, ["id", "agent_id", "version"], where=where)
    faded = found.filter(pl.col("id").is_in(held.archivable(found["id"].to_list())))
    noise = forgettable(store, agent_ids, now=now, held=held).filter(~pl.col("id").is_in(faded["id"].to_list()))
    return pl.concat(
        [faded.with_columns(reason=pl.lit("faded")), noise.with_columns(reason=pl.lit("noise"))], how="vertical"
    ).sort("id")


def _commit(store: MemoryStore, decided: pl.DataFrame, *, now: datetime, run_id: str) -> Written:
    """Archive the decided rows at the versions read, each pre-image audited (one compare-and-set)."""
    changes = decided.select("id", "version").with_columns(status=pl.lit("archived"), updated_at=pl.lit(now))
    result = store.engine.cas_write(changes.to_dicts(), actor=ACTOR, action="archive", run_id=run_id, audit=True)
    return Written({"archived": result.applied}, missed=result.skipped_concurrent_edit)


def _redecide(fresh: list[Memory], *, floor: float, held: Holders, cutoff: datetime) -> pl.DataFrame:
    """Re-read rows that still qualify: visible, unpinned, below the floor, let go by the retention policy; or
    still taken by the noise rule."""
    keep = [
        {"id": r["id"], "version": r["version"]}
        for r in fresh
        if (is_visible(r) and not r.get("pinned") and confidence_of(r) < floor and held.may_archive(r["id"]))
        or held.forgets(r, cutoff=cutoff)
    ]
    return pl.DataFrame(keep, schema={"id": pl.String, "version": pl.Int64})


def _unrecorded_counts(before: pl.DataFrame, after: pl.DataFrame, *, now: datetime) -> BatchResult:
    """Rows a killed attempt of this run archived after its last recorded batch (stamped with the run's ``now``;
    see ``PassCursor.unrecorded``): they are no longer candidates when the run resumes."""
    was = before.select("id", pl.col("status").alias("was"))
    done = after.join(was, on="id").filter(
        (pl.col("status") == "archived") & (pl.col("was") != "archived") & (pl.col("updated_at") == pl.lit(now))
    )
    counted = count_frames({"processed": done, "archived": done})
    return BatchResult(counted.counts, dict.fromkeys(done["id"].to_list(), "archived"), counted.by_agent)
