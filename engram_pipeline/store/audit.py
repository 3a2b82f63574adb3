"""The audit table: one event per change worth answering for, with the full pre-image of any row a pass took
out of recall (``before``). It survives the deletion of the memory, and ``restore`` reads it.

Append-mostly, one commit per batch of events.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import pyarrow as pa

from engram_pipeline.model import AUDIT_SCHEMA, Memory, row_from_json, row_to_json, rows_to_table, utcnow
from engram_pipeline.store import one_trip
from engram_pipeline.store.maintenance import FragmentBound
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.sql import eq, in_list, where_in

# Audit actions after which ``restore`` may bring a row back.
HidingAction = Literal["prune", "merge", "supersede", "archive", "delete"]
HIDING_ACTIONS: tuple[HidingAction, ...] = ("prune", "merge", "supersede", "archive", "delete")
# Those of them that remove the row from the table (the others leave it there, hidden).
REMOVING_ACTIONS: tuple[HidingAction, ...] = ("prune", "delete")
AuditEvent = dict[str, Any]  # a row of AUDIT_SCHEMA


class AuditLog:
    """The ``audit`` table and the reads and writes of its events."""

    def __init__(self, table: Any, memory_schema: pa.Schema) -> None:
        self.table = table
        self.memory_schema = memory_schema
        self.bound = FragmentBound(table)

    def record(self, events: Sequence[AuditEvent], *, actor: str, run_id: str | None = None) -> None:
        """Append audit events (``memory_id``, ``agent_id``, ``action``, ``before``/``after`` rows or text).

        An event may carry its own ``event_id``: events with ids already in the table are not added again, so
        a write-ahead audit that a resumed pass repeats is recorded once.
        """
        if not events:
            return
        now = utcnow()
        rows = []
        for e in events:
            rows.append(
                {
                    "event_id": e.get("event_id") or uuid.uuid4().hex,
                    "memory_id": e["memory_id"],
                    "agent_id": e["agent_id"],
                    "action": e["action"],
                    "actor": actor,
                    "run_id": run_id,
                    "at": now,
                    "before": self._image(e.get("before")),
                    "after": self._image(e.get("after")),
                }
            )
        table = rows_to_table(rows, AUDIT_SCHEMA)
        if any(e.get("event_id") for e in events):
            with_retry(lambda: self.table.merge_insert("event_id").when_not_matched_insert_all().execute(table))
        else:
            with_retry(lambda: self.table.add(table))
        self.bound.wrote()

    def drop(self, event_ids: Sequence[str]) -> None:
        """Remove write-ahead events whose change did not happen (the row moved before the commit)."""
        for where in where_in("event_id", event_ids):
            with_retry(functools.partial(self.table.delete, where))
            self.bound.wrote()

    def _image(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        return row_to_json(value, self.memory_schema)

    def events(self, memory_id: str) -> list[AuditEvent]:
        """Every audit event of one memory, oldest first."""
        rows = one_trip.read(self.table, eq("memory_id", memory_id)).to_pylist()
        return sorted(rows, key=lambda r: (r["at"], r["event_id"]))

    def last_pre_image(self, memory_id: str) -> tuple[Memory, AuditEvent] | None:
        """The pre-image of the newest event that took the row out of recall, and that event."""
        events = [e for e in self.events(memory_id) if e["action"] in HIDING_ACTIONS and e["before"] is not None]
        if not events:
            return None
        event = events[-1]
        return row_from_json(event["before"], self.memory_schema), event

    def audited(self, memory_ids: Sequence[str], *, action: str, run_id: str) -> set[str]:
        """Which of ``memory_ids`` have an ``action`` event of run ``run_id``."""
        found: set[str] = set()
        for ids in where_in("memory_id", memory_ids):
            where = f"{ids} AND {eq('action', action)} AND {eq('run_id', run_id)}"
            rows = one_trip.read(self.table, where, columns=["memory_id"])
            found.update(rows["memory_id"].to_pylist())
        return found

    def for_agent(
        self,
        agent_id: str | Sequence[str],
        *,
        actions: Iterable[str] | None = None,
        memory_ids: Sequence[str] | None = None,
        where: str | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The agent's events, or those of every agent of a sequence (a sweep: at most 1,000 of them; those of
        ``actions``, of ``memory_ids``, passing ``where``, extra SQL the caller has quoted), as an Arrow table of
        ``columns`` (default: all)."""
        cond = eq("agent_id", agent_id) if isinstance(agent_id, str) else f"agent_id IN {in_list(agent_id)}"
        if actions is not None:
            cond += f" AND action IN {in_list(actions)}"
        if where:
            cond += f" AND ({where})"
        if memory_ids is not None and not memory_ids:
            return AUDIT_SCHEMA.empty_table().select(list(columns or AUDIT_SCHEMA.names))
        chunks: list[str | None] = [None] if memory_ids is None else list(where_in("memory_id", memory_ids))
        parts = []
        for chunk in chunks:
            parts.append(one_trip.read(self.table, cond if chunk is None else f"{cond} AND {chunk}", columns=columns))
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
