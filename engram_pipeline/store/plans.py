"""The plans table: corpus-merge (and other) plans a person reviews before they are applied."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from engram_pipeline.model import PLAN_SCHEMA, PlanRecord, PlanStatus, rows_to_table, utcnow
from engram_pipeline.store import one_trip
from engram_pipeline.store.maintenance import FragmentBound
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.sql import eq, lit, where_in

Plan = PlanRecord  # a row of PLAN_SCHEMA with ``body`` and ``result`` decoded (model.PlanRecord)


class Plans:
    """The ``plans`` table: save, read, mark applied and close (discard, expire) plans."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.bound = FragmentBound(table)

    def save(
        self, agent_id: str, body: dict[str, Any], *, kind: str = "corpus_merge", run_id: str | None = None
    ) -> str:
        """Store a pending plan; returns its id."""
        return self.save_many({agent_id: body}, kind=kind, run_id=run_id)[agent_id]

    def save_many(
        self, bodies: Mapping[str, dict[str, Any]], *, kind: str = "corpus_merge", run_id: str | None = None
    ) -> dict[str, str]:
        """Store one pending plan per agent (``{agent_id: body}``) in one commit; returns each agent's plan id.
        Nothing to store writes nothing."""
        if not bodies:
            return {}
        now = utcnow()
        # Hyphens, not a "T", between date and time: a browser may break the id there, so the review table's
        # plan id column stays narrow and leaves the room to the content.
        ids = {agent: f"plan-{now:%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}" for agent in bodies}
        rows = [
            {
                "plan_id": ids[agent],
                "agent_id": agent,
                "kind": kind,
                "status": "pending",
                "created_at": now,
                "run_id": run_id,
                "body": json.dumps(body, sort_keys=True, default=str),
            }
            for agent, body in bodies.items()
        ]
        table = rows_to_table(rows, PLAN_SCHEMA)
        with_retry(lambda: self.table.add(table))
        self.bound.wrote()
        return ids

    def get(self, plan_id: str) -> Plan | None:
        rows = one_trip.read(self.table, eq("plan_id", plan_id), limit=1).to_pylist()
        return _plan(rows[0]) if rows else None

    def of(self, agent_id: str, *, kind: str = "corpus_merge", status: PlanStatus | None = None) -> list[Plan]:
        """The agent's plans of ``kind`` (only those with ``status``, e.g. "pending", if given), oldest first."""
        return self.of_agents([agent_id], kind=kind, status=status).get(agent_id, [])

    def of_agents(
        self, agent_ids: Iterable[str], *, kind: str = "corpus_merge", status: PlanStatus | None = None
    ) -> dict[str, list[Plan]]:
        """:meth:`of` for every agent of ``agent_ids`` in one read per 1,000 agents: ``{agent: plans}``, oldest
        first; an agent without such plans is left out."""
        agents = sorted(set(agent_ids))
        cond = eq("kind", kind) + ("" if status is None else f" AND {eq('status', status)}")
        rows = [
            r
            for where in where_in("agent_id", agents)
            for r in one_trip.read(self.table, f"{where} AND {cond}").to_pylist()
        ]
        out: dict[str, list[Plan]] = {}
        for r in sorted(rows, key=lambda r: (r["created_at"], r["plan_id"])):
            out.setdefault(r["agent_id"], []).append(_plan(r))
        return out

    def latest(self, agent_id: str, *, kind: str = "corpus_merge", status: PlanStatus | None = None) -> Plan | None:
        """The agent's newest plan of ``kind`` (only among plans with ``status``, e.g. "pending", if given)."""
        plans = self.of(agent_id, kind=kind, status=status)
        return plans[-1] if plans else None

    def mark_applied(self, plan_id: str, result: dict[str, Any]) -> None:
        values = {"status": "applied", "applied_at": utcnow(), "result": json.dumps(result, default=str)}
        with_retry(lambda: self.table.update(where=eq("plan_id", plan_id), values=values))
        self.bound.wrote()

    def close(self, plan_id: str, status: PlanStatus, note: dict[str, Any]) -> bool:
        """Compare-and-set a pending plan to ``status`` ("discarded", "expired") with ``note`` as its result;
        False (nothing written) when the plan is not pending any more."""
        return plan_id in self.close_many({plan_id: note}, status)

    def close_many(self, notes: Mapping[str, dict[str, Any]], status: PlanStatus) -> set[str]:
        """:meth:`close` for every plan of ``notes`` (``{plan_id: note}``) in one compare-and-set commit;
        returns the ids it closed (a plan not pending any more is left as it is). No plans: no commit."""
        if not notes:
            return set()
        results = {p: json.dumps(n, sort_keys=True, default=str) for p, n in notes.items()}
        source = pa.table(
            {
                "plan_id": pa.array(list(results), pa.string()),
                "status": pa.array([status] * len(results), pa.string()),
                "result": pa.array(list(results.values()), pa.string()),
            }
        )
        merged = with_retry(
            lambda: (
                self.table.merge_insert("plan_id")
                .when_matched_update_all(where=f"target.status = {lit('pending')}")
                .use_index(False)  # a partial-column source: the scan join (see store/cas.py)
                .execute(source)
            )
        )
        self.bound.wrote()
        if int(merged.num_updated_rows) == len(results):
            return set(results)
        # Some were not pending any more: which ones this commit closed, from what the plans hold now.
        now = [
            row
            for where in where_in("plan_id", list(results))
            for row in one_trip.read(
                self.table, f"{where} AND {eq('status', status)}", columns=["plan_id", "result"]
            ).to_pylist()
        ]
        return {r["plan_id"] for r in now if r["result"] == results[r["plan_id"]]}


def _plan(row: dict[str, Any]) -> Plan:
    return {
        "plan_id": row["plan_id"],
        "agent_id": row["agent_id"],
        "kind": row["kind"],
        "status": row["status"],
        "created_at": row["created_at"],
        "applied_at": row.get("applied_at"),
        "run_id": row.get("run_id"),
        "body": json.loads(row["body"]) if row["body"] else {},
        "result": json.loads(row["result"]) if row.get("result") else None,
    }
