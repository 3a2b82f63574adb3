"""Consolidation stage 5: archive what faded (confidence below ``ENGRAM_ARCHIVE_CONFIDENCE``, default 0.40)
and what the retention policy lets go (:mod:`engram_pipeline.lifecycle.retention`): under the default ``safe``
policy only rows whose content a visible derived belief, procedure or schema (``derived-from``) or a merge
canonical holds, so an episode is archived only after the earlier stages consolidated it; under ``seed`` any.

Archiving is soft: status ``archived`` (hidden from default recall, returned with ``include_archived``),
written through the compare-and-set with an audited pre-image so that ``store.restore(id)`` brings the row
back as it was. Pinned rows and hidden rows (superseded, already archived) are left alone. A row edited
concurrently is re-read once; if it still qualifies it is archived, else it is left (``unchanged``). The pass
keeps its own cursor: a killed run resumes after its last committed batch and reports the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import polars as pl

from engram_pipeline.lifecycle._batched import BatchResult, Recount, Written, run_batched, write_decided
from engram_pipeline.lifecycle._common import PassCursor
from engram_pipeline.lifecycle.retention import Holders, holders
from engram_pipeline.model import Memory, confidence_of
from engram_pipeline.visibility import VISIBLE_SQL, is_visible

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

ACTOR = "consolidation"
PASS_NAME = "archival"


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
    ``batch_size`` (default ``MEMORY_DECAY_BATCH_SIZE``); a killed run resumes from its cursor."""
    floor = float(store.settings.archive_confidence)
    cursor = PassCursor.deferred(store, PASS_NAME, agent_id, now=now, run_id=run_id)
    now = cursor.now
    where = f"{VISIBLE_SQL} AND (pinned IS NULL OR NOT pinned) AND confidence < {floor!r}"
    held = holders(store, agent_id)

    def work() -> pl.DataFrame:
        found = pl.from_arrow(store.scan(agent_id, columns=["id", "version"], where=where))
        assert isinstance(found, pl.DataFrame)
        return found.filter(pl.col("id").is_in(held.archivable(found["id"].to_list())))

    commit = partial(_commit, store, now=now, run_id=cursor.run_id)
    redecide = partial(_redecide, floor=floor, held=held)
    run = run_batched(
        cursor,
        work,
        lambda batch: write_decided(store, batch, commit, redecide, record=["archived"]),
        size=batch_size or store.settings.decay_batch_size,
        counts=("processed", "archived", "skipped_concurrent_edit"),
        recount=Recount(["status", "updated_at"], partial(_unrecorded_counts, now=now)),
    )
    archived = tuple(sorted(i for i, what in run.outcome.items() if what == "archived"))
    c = run.counts
    return ArchivalReport(c["processed"], c["archived"], c["skipped_concurrent_edit"], archived, run.cursor)


def _commit(store: MemoryStore, decided: pl.DataFrame, *, now: datetime, run_id: str) -> Written:
    """Archive the decided rows at the versions read, each pre-image audited (one compare-and-set)."""
    changes = decided.select("id", "version").with_columns(status=pl.lit("archived"), updated_at=pl.lit(now))
    result = store.cas_write(changes.to_dicts(), actor=ACTOR, action="archive", run_id=run_id, audit=True)
    return Written({"archived": result.applied}, missed=result.skipped_concurrent_edit)


def _redecide(fresh: list[Memory], *, floor: float, held: Holders) -> pl.DataFrame:
    """Re-read rows that still qualify: visible, unpinned, below the floor, let go by the retention policy."""
    keep = [
        {"id": r["id"], "version": r["version"]}
        for r in fresh
        if is_visible(r) and not r.get("pinned") and confidence_of(r) < floor and held.may_archive(r["id"])
    ]
    return pl.DataFrame(keep, schema={"id": pl.String, "version": pl.Int64})


def _unrecorded_counts(before: pl.DataFrame, after: pl.DataFrame, *, now: datetime) -> BatchResult:
    """Rows a killed attempt of this run archived after its last recorded batch (stamped with the run's ``now``;
    see ``PassCursor.unrecorded``): they are no longer candidates when the run resumes."""
    was = before.select("id", pl.col("status").alias("was"))
    done = after.join(was, on="id").filter(
        (pl.col("status") == "archived") & (pl.col("was") != "archived") & (pl.col("updated_at") == pl.lit(now))
    )
    counts = {"processed": done.height, "archived": done.height}
    return BatchResult(counts, dict.fromkeys(done["id"].to_list(), "archived"))
