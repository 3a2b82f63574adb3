"""What every lifecycle pass shares: run ids, reading an agent as a polars frame, and resumable cursors.

A pass reads one agent's rows column-wise, computes its changes with polars/numpy, and writes them through
the store's batched compare-and-set in batches ordered by id. After each batch it advances its cursor
(``cursors`` table, key ``<pass>/<agent>``). A run that was killed leaves an unfinished cursor; the next run
of that pass for that agent resumes after the last committed id **with the same ``now``**, so the end state
equals that of an uninterrupted run, and rows already written are not written again (their version moved,
and a recomputation finds nothing left to change).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from engram_pipeline.model import Memory, utcnow

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore


def new_run_id(pass_name: str) -> str:
    return f"{pass_name}-{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def agent_frame(
    store: MemoryStore, agent_id: str, columns: list[str] | None = None, where: str | None = None
) -> pl.DataFrame:
    """One agent's rows (optionally only ``columns``) as a polars frame, sorted by id."""
    table = store.scan(agent_id, columns=columns, where=where)
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df.sort("id") if "id" in df.columns else df


@dataclass
class PassCursor:
    """Resumable progress of one pass over one agent."""

    store: MemoryStore
    pass_name: str
    agent_id: str
    state: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        store: MemoryStore,
        pass_name: str,
        agent_id: str,
        *,
        now: datetime | None = None,
        run_id: str | None = None,
    ) -> PassCursor:
        """Resume an unfinished run of this pass (keeping its ``now``), or begin a new one."""
        saved = store.get_cursor(pass_name, agent_id)
        if saved and not saved.get("done"):
            saved["resumed"] = int(saved.get("resumed", 0)) + 1
            return cls(store, pass_name, agent_id, saved)
        state = {
            "run_id": run_id or new_run_id(pass_name),
            "now": (now or utcnow()).isoformat(),
            "after": None,
            "done": False,
            "batches": 0,
            "resumed": 0,
        }
        cursor = cls(store, pass_name, agent_id, state)
        store.set_cursor(pass_name, agent_id, state)
        return cursor

    @property
    def now(self) -> datetime:
        return datetime.fromisoformat(self.state["now"])

    @property
    def run_id(self) -> str:
        return str(self.state["run_id"])

    @property
    def after(self) -> str | None:
        return self.state.get("after")

    def batches(self, ids: list[str], size: int) -> Iterator[list[str]]:
        """The sorted ``ids`` not yet done, in batches of ``size``."""
        todo = sorted(i for i in ids if self.after is None or i > self.after)
        for start in range(0, len(todo), size):
            yield todo[start : start + size]

    def advance(self, last_id: str, **counts: int) -> None:
        """Record that every id up to ``last_id`` is done (call after the batch's commit)."""
        self.state["after"] = last_id
        self.state["batches"] = int(self.state.get("batches", 0)) + 1
        totals = self.state.setdefault("counts", {})
        for key, value in counts.items():
            totals[key] = int(totals.get(key, 0)) + int(value)
        self.store.set_cursor(self.pass_name, self.agent_id, self.state)

    def finish(self, **summary: Any) -> dict[str, Any]:
        self.state.update(done=True, finished_at=utcnow().isoformat(), **summary)
        self.store.set_cursor(self.pass_name, self.agent_id, self.state)
        return {k: self.state.get(k) for k in ("run_id", "after", "batches", "resumed", "done")}

    @property
    def counts(self) -> dict[str, int]:
        """Counts accumulated by earlier (killed) attempts of this run, to add to this attempt's."""
        return dict(self.state.get("counts", {}))


def delete_rechecked(
    store: MemoryStore,
    expected: dict[str, int],
    *,
    recheck: Callable[[list[Memory]], dict[str, int]],
    actor: str,
    action: str,
    run_id: str | None = None,
) -> tuple[list[str], list[str]]:
    """Delete rows still at their ``expected`` versions (audited pre-images, one commit), re-reading the
    misses once: ``recheck(fresh_rows)`` returns ``{id: version}`` of those that should still go.

    Returns ``(deleted ids, skipped ids)``; skipped are rows that moved again, or vanished, in between.
    A re-read row that ``recheck`` leaves out no longer qualifies and is neither.
    """
    if not expected:
        return [], []
    first = store.cas_delete(expected, actor=actor, action=action, run_id=run_id)
    deleted = list(first.applied)
    misses = list(first.skipped_concurrent_edit)
    if not misses:
        return deleted, []
    fresh = store.get_many(misses)
    gone = sorted(set(misses) - {r["id"] for r in fresh})
    again = store.cas_delete(recheck(fresh), actor=actor, action=action, run_id=run_id)
    return deleted + list(again.applied), gone + list(again.skipped_concurrent_edit)
