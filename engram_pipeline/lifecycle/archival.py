"""Consolidation stage 5: archive what faded (confidence below ``ENGRAM_ARCHIVE_CONFIDENCE``, default 0.40)
and what the retention policy lets go (:mod:`engram_pipeline.lifecycle.retention`): under the default ``safe``
policy only rows whose content a visible derived belief, procedure or schema (``derived-from``) or a merge
canonical holds, so an episode is archived only after the earlier stages consolidated it; under ``seed`` any.

Archiving is soft: status ``archived`` (hidden from default recall, returned with ``include_archived``),
written through the compare-and-set with an audited pre-image so that ``store.restore(id)`` brings the row
back as it was. Pinned rows and hidden rows (superseded, already archived) are left alone. A row edited
concurrently is re-read once; if it still qualifies it is archived, else it is left (``unchanged``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram_pipeline.lifecycle.confidence import VISIBLE
from engram_pipeline.lifecycle.retention import holders
from engram_pipeline.model import Memory, confidence_of, utcnow

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

ACTOR = "consolidation"


@dataclass(frozen=True)
class ArchivalReport:
    candidates: int
    archived: int
    skipped_concurrent_edit: int
    archived_ids: tuple[str, ...] = ()


def archive_faded(
    store: MemoryStore, agent_id: str, *, now: datetime | None = None, run_id: str | None = None
) -> ArchivalReport:
    """Archive the agent's visible, unpinned rows whose confidence is below the archive floor."""
    floor = float(store.settings.archive_confidence)
    now = now or utcnow()
    where = f"{VISIBLE} AND (pinned IS NULL OR NOT pinned) AND confidence < {floor!r}"
    rows = store.scan(agent_id, columns=["id", "version"], where=where).to_pylist()
    held = holders(store, agent_id) if rows else None
    rows = [r for r in rows if held is not None and held.may_archive(r["id"])]

    def change(row: Memory) -> dict[str, Any]:
        return {"id": row["id"], "version": row["version"], "status": "archived", "updated_at": now}

    def redo(fresh: list[Memory]) -> list[dict[str, Any]]:
        return [
            change(r)
            for r in fresh
            if r["status"] not in ("superseded", "archived")
            and not r.get("superseded_by")
            and not r.get("pinned")
            and confidence_of(r) < floor
            and held is not None
            and held.may_archive(r["id"])
        ]

    applied: list[str] = []
    skipped = 0
    batch = store.settings.decay_batch_size
    for start in range(0, len(rows), batch):
        result = store.cas_write(
            [change(r) for r in rows[start : start + batch]],
            recompute=redo,
            actor=ACTOR,
            action="archive",
            run_id=run_id,
            audit=True,
        )
        applied += result.applied
        skipped += len(result.skipped_concurrent_edit)
    return ArchivalReport(len(rows), len(applied), skipped, tuple(sorted(applied)))
