"""The store's side tables: audit events, links, corpus-merge plans and pass cursors.

Each is append-mostly and written in one commit per batch. The audit table keeps the full pre-image of any
row a pass took out of recall (``before``); it survives the deletion of the memory, and ``restore`` reads it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from engram_pipeline.model import (
    AUDIT_SCHEMA,
    CURSOR_SCHEMA,
    LINK_SCHEMA,
    PLAN_SCHEMA,
    Memory,
    row_from_json,
    row_to_json,
    rows_to_table,
    utcnow,
)
from engram_pipeline.store.cas import _with_retry
from engram_pipeline.store.sql import eq, in_list, lit

# Audit actions after which ``restore`` may bring a row back.
LEASE_PREFIX = "lease:"  # lease rows share the cursors table; no pass name starts with this
HIDING_ACTIONS = ("prune", "merge", "supersede", "archive", "delete")


class RecordsMixin:
    """Audit, links, plans and cursors; mixed into :class:`MemoryStore`."""

    memory_schema: pa.Schema
    audit: Any
    links: Any
    plans: Any
    cursors: Any

    # -- audit -----------------------------------------------------------------------------------------
    def record_audit(self, events: Sequence[dict[str, Any]], *, actor: str, run_id: str | None = None) -> None:
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
            _with_retry(lambda: self.audit.merge_insert("event_id").when_not_matched_insert_all().execute(table))
        else:
            _with_retry(lambda: self.audit.add(table))

    def drop_audit_events(self, event_ids: Sequence[str]) -> None:
        """Remove write-ahead events whose change did not happen (the row moved before the commit)."""
        if event_ids:
            _with_retry(lambda: self.audit.delete(f"event_id IN {in_list(event_ids)}"))

    def _image(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        return row_to_json(value, self.memory_schema)

    def audit_events(self, memory_id: str) -> list[dict[str, Any]]:
        """Every audit event of one memory, oldest first."""
        rows = self.audit.search().where(eq("memory_id", memory_id)).limit(None).to_arrow().to_pylist()
        return sorted(rows, key=lambda r: (r["at"], r["event_id"]))

    def last_pre_image(self, memory_id: str) -> tuple[Memory, dict[str, Any]] | None:
        """The pre-image of the newest event that took the row out of recall, and that event."""
        events = [e for e in self.audit_events(memory_id) if e["action"] in HIDING_ACTIONS and e["before"] is not None]
        if not events:
            return None
        event = events[-1]
        return row_from_json(event["before"], self.memory_schema), event

    def audited(self, memory_ids: Sequence[str], *, action: str, run_id: str) -> set[str]:
        """Which of ``memory_ids`` have an ``action`` event of run ``run_id``."""
        found: set[str] = set()
        for start in range(0, len(memory_ids), 1000):
            chunk = memory_ids[start : start + 1000]
            where = f"memory_id IN {in_list(chunk)} AND {eq('action', action)} AND {eq('run_id', run_id)}"
            rows = self.audit.search().where(where).select(["memory_id"]).limit(None).to_arrow()
            found.update(rows["memory_id"].to_pylist())
        return found

    def audit_for_agent(self, agent_id: str, *, actions: Iterable[str] | None = None) -> pa.Table:
        where = eq("agent_id", agent_id)
        if actions is not None:
            where += f" AND action IN {in_list(actions)}"
        return self.audit.search().where(where).limit(None).to_arrow()

    # -- links -----------------------------------------------------------------------------------------
    def add_links(self, links: Sequence[dict[str, Any]], *, run_id: str | None = None, keyed: bool = False) -> None:
        """Append links (``agent_id``, ``src_id``, ``dst_id``, ``rel``, ``score``) in one commit.

        ``keyed``: a link whose (``src_id``, ``dst_id``, ``rel``) is already stored is not added again, so a
        resumed pass that repeats a batch does not duplicate its links.
        """
        if keyed and links:
            have = {(r["src_id"], r["dst_id"], r["rel"]) for r in self.links_of([link["src_id"] for link in links])}
            links = [link for link in links if (link["src_id"], link["dst_id"], link["rel"]) not in have]
        if not links:
            return
        now = utcnow()
        rows = [{"created_at": now, "run_id": run_id, **link} for link in links]
        table = rows_to_table(rows, LINK_SCHEMA)
        if keyed:
            on = ["src_id", "dst_id", "rel"]
            _with_retry(lambda: self.links.merge_insert(on).when_not_matched_insert_all().execute(table))
        else:
            _with_retry(lambda: self.links.add(table))

    def drop_links(self, *, src_id: str, dst_id: str, rel: str) -> None:
        """Remove the links ``src_id -rel-> dst_id`` (one commit; none there is a no-op)."""
        where = f"{eq('src_id', src_id)} AND {eq('dst_id', dst_id)} AND {eq('rel', rel)}"
        if self.links.count_rows(where):
            _with_retry(lambda: self.links.delete(where))

    def links_of(self, memory_ids: Iterable[str], *, rel: str | None = None) -> list[dict[str, Any]]:
        ids = list(memory_ids)
        if not ids:
            return []
        where = f"(src_id IN {in_list(ids)} OR dst_id IN {in_list(ids)})"
        if rel is not None:
            where += f" AND rel = {lit(rel)}"
        return self.links.search().where(where).limit(None).to_arrow().to_pylist()

    def links_for_agent(self, agent_id: str) -> pa.Table:
        return self.links.search().where(eq("agent_id", agent_id)).limit(None).to_arrow()

    # -- plans -----------------------------------------------------------------------------------------
    def save_plan(
        self,
        agent_id: str,
        body: dict[str, Any],
        *,
        kind: str = "corpus_merge",
        run_id: str | None = None,
    ) -> str:
        # Hyphens, not a "T", between date and time: a browser may break the id there, so the review table's
        # plan id column stays narrow and leaves the room to the content.
        plan_id = f"plan-{utcnow():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"
        row = {
            "plan_id": plan_id,
            "agent_id": agent_id,
            "kind": kind,
            "status": "pending",
            "created_at": utcnow(),
            "run_id": run_id,
            "body": json.dumps(body, sort_keys=True, default=str),
        }
        table = rows_to_table([row], PLAN_SCHEMA)
        _with_retry(lambda: self.plans.add(table))
        return plan_id

    def get_plan(self, plan_id: str) -> dict[str, Any] | None:
        rows = self.plans.search().where(eq("plan_id", plan_id)).limit(1).to_arrow().to_pylist()
        return _plan(rows[0]) if rows else None

    def latest_plan(
        self, agent_id: str, *, kind: str = "corpus_merge", status: str | None = None
    ) -> dict[str, Any] | None:
        """The agent's newest plan of ``kind`` (only among plans with ``status``, e.g. "pending", if given)."""
        where = f"{eq('agent_id', agent_id)} AND {eq('kind', kind)}"
        if status is not None:
            where += f" AND {eq('status', status)}"
        rows = self.plans.search().where(where).limit(None).to_arrow().to_pylist()
        if not rows:
            return None
        return _plan(max(rows, key=lambda r: (r["created_at"], r["plan_id"])))

    def plans_of(self, agent_id: str, *, kind: str = "corpus_merge", status: str | None = None) -> list[dict[str, Any]]:
        """The agent's plans of ``kind`` (only those with ``status``, e.g. "pending", if given), oldest first."""
        where = f"{eq('agent_id', agent_id)} AND {eq('kind', kind)}"
        if status is not None:
            where += f" AND {eq('status', status)}"
        rows = self.plans.search().where(where).limit(None).to_arrow().to_pylist()
        return [_plan(r) for r in sorted(rows, key=lambda r: (r["created_at"], r["plan_id"]))]

    def mark_plan_applied(self, plan_id: str, result: dict[str, Any]) -> None:
        values = {"status": "applied", "applied_at": utcnow(), "result": json.dumps(result, default=str)}
        _with_retry(lambda: self.plans.update(where=eq("plan_id", plan_id), values=values))

    def close_plan(self, plan_id: str, status: str, note: dict[str, Any]) -> bool:
        """Compare-and-set a pending plan to ``status`` ("discarded", "expired") with ``note`` as its result;
        False (nothing written) when the plan is not pending any more."""
        where = f"{eq('plan_id', plan_id)} AND {eq('status', 'pending')}"
        values = {"status": status, "result": json.dumps(note, sort_keys=True, default=str)}
        result = _with_retry(lambda: self.plans.update(where=where, values=values))
        return int(result.rows_updated) > 0

    # -- cursors ---------------------------------------------------------------------------------------
    def get_cursor(self, pass_name: str, agent_id: str) -> dict[str, Any] | None:
        rows = self.cursors.search().where(eq("key", f"{pass_name}/{agent_id}")).limit(1).to_arrow().to_pylist()
        return json.loads(rows[0]["cursor"]) if rows and rows[0]["cursor"] else None

    def set_cursor(self, pass_name: str, agent_id: str, cursor: dict[str, Any] | None) -> None:
        row = {
            "key": f"{pass_name}/{agent_id}",
            "pass_name": pass_name,
            "agent_id": agent_id,
            "cursor": None if cursor is None else json.dumps(cursor, sort_keys=True, default=str),
            "updated_at": utcnow(),
        }
        table = rows_to_table([row], CURSOR_SCHEMA)
        _with_retry(
            lambda: (
                self.cursors.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(table)
            )
        )

    # -- leases ----------------------------------------------------------------------------------------
    def lease_holder(self, key: str) -> str | None:
        """The holder (JSON text) of lease ``key``, None when it is free; creates the free row on first use.

        Two processes that both create the row may leave two free rows (a racing ``merge_insert`` insert can
        duplicate a key); :meth:`swap_lease` updates every row of the key at once, so they stay identical.
        """
        cond = eq("key", LEASE_PREFIX + key)
        rows = self.cursors.search().where(cond).select(["cursor"]).limit(None).to_arrow()["cursor"].to_pylist()
        if not rows:
            row = {"key": LEASE_PREFIX + key, "pass_name": LEASE_PREFIX, "agent_id": None, "cursor": None}
            table = rows_to_table([{**row, "updated_at": utcnow()}], CURSOR_SCHEMA)
            _with_retry(lambda: self.cursors.merge_insert("key").when_not_matched_insert_all().execute(table))
            return self.lease_holder(key)
        held = [r for r in rows if r is not None]
        return held[0] if held else None

    def swap_lease(self, key: str, expected: str | None, holder: str | None) -> bool:
        """Compare-and-set lease ``key`` from ``expected`` (None: free) to ``holder``; True if it applied."""
        cond = eq("key", LEASE_PREFIX + key) + (
            " AND cursor IS NULL" if expected is None else f" AND cursor = {lit(expected)}"
        )
        result = _with_retry(lambda: self.cursors.update(where=cond, values={"cursor": holder, "updated_at": utcnow()}))
        return int(result.rows_updated) > 0


def _plan(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    out["body"] = json.loads(row["body"]) if row["body"] else {}
    out["result"] = json.loads(row["result"]) if row.get("result") else None
    return out
