"""The plans table: corpus-merge (and other) plans a person reviews before they are applied."""

from __future__ import annotations

import json
import uuid
from typing import Any

from engram_pipeline.model import PLAN_SCHEMA, PlanStatus, rows_to_table, utcnow
from engram_pipeline.store.cas import _with_retry
from engram_pipeline.store.maintenance import FragmentBound
from engram_pipeline.store.sql import eq

Plan = dict[str, Any]  # a row of PLAN_SCHEMA with ``body`` and ``result`` decoded


class Plans:
    """The ``plans`` table: save, read, mark applied and close (discard, expire) plans."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.bound = FragmentBound(table)

    def save(
        self, agent_id: str, body: dict[str, Any], *, kind: str = "corpus_merge", run_id: str | None = None
    ) -> str:
        """Store a pending plan; returns its id."""
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
        _with_retry(lambda: self.table.add(table))
        self.bound.wrote()
        return plan_id

    def get(self, plan_id: str) -> Plan | None:
        rows = self.table.search().where(eq("plan_id", plan_id)).limit(1).to_arrow().to_pylist()
        return _plan(rows[0]) if rows else None

    def of(self, agent_id: str, *, kind: str = "corpus_merge", status: PlanStatus | None = None) -> list[Plan]:
        """The agent's plans of ``kind`` (only those with ``status``, e.g. "pending", if given), oldest first."""
        where = f"{eq('agent_id', agent_id)} AND {eq('kind', kind)}"
        if status is not None:
            where += f" AND {eq('status', status)}"
        rows = self.table.search().where(where).limit(None).to_arrow().to_pylist()
        return [_plan(r) for r in sorted(rows, key=lambda r: (r["created_at"], r["plan_id"]))]

    def latest(self, agent_id: str, *, kind: str = "corpus_merge", status: PlanStatus | None = None) -> Plan | None:
        """The agent's newest plan of ``kind`` (only among plans with ``status``, e.g. "pending", if given)."""
        plans = self.of(agent_id, kind=kind, status=status)
        return plans[-1] if plans else None

    def mark_applied(self, plan_id: str, result: dict[str, Any]) -> None:
        values = {"status": "applied", "applied_at": utcnow(), "result": json.dumps(result, default=str)}
        _with_retry(lambda: self.table.update(where=eq("plan_id", plan_id), values=values))
        self.bound.wrote()

    def close(self, plan_id: str, status: PlanStatus, note: dict[str, Any]) -> bool:
        """Compare-and-set a pending plan to ``status`` ("discarded", "expired") with ``note`` as its result;
        False (nothing written) when the plan is not pending any more."""
        where = f"{eq('plan_id', plan_id)} AND {eq('status', 'pending')}"
        values = {"status": status, "result": json.dumps(note, sort_keys=True, default=str)}
        result = _with_retry(lambda: self.table.update(where=where, values=values))
        self.bound.wrote()
        return int(result.rows_updated) > 0


def _plan(row: dict[str, Any]) -> Plan:
    out = dict(row)
    out["body"] = json.loads(row["body"]) if row["body"] else {}
    out["result"] = json.loads(row["result"]) if row.get("result") else None
    return out
