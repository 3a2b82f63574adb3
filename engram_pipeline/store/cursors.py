"""The cursors table: where each pass got to for each agent, and the leases that keep one run per scope."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engram_pipeline.model import CURSOR_SCHEMA, rows_to_table, utcnow
from engram_pipeline.store import one_trip
from engram_pipeline.store.maintenance import FragmentBound
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.sql import eq, lit, where_in

LEASE_PREFIX = "lease:"  # lease rows share the cursors table; no pass name starts with this


def lease_agent(key: str) -> str | None:
    """The agent (or sweep scope, ``shard/<k>-of-<n>``) a cursor or lease key names (``[lease:]<pass>/<agent>``;
    pass names and agent ids hold no ``/``), None for a key that names none: a lease lives in that agent's
    shard, any other in shard 0."""
    head, sep, agent = key.removeprefix(LEASE_PREFIX).partition("/")
    return agent if sep and head else None


class Cursors:
    """The ``cursors`` table: pass cursors (JSON state per pass and agent) and leases."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.bound = FragmentBound(table)

    def get(self, pass_name: str, agent_id: str) -> dict[str, Any] | None:
        rows = one_trip.read(self.table, eq("key", f"{pass_name}/{agent_id}"), limit=1).to_pylist()
        return json.loads(rows[0]["cursor"]) if rows and rows[0]["cursor"] else None

    def set(self, pass_name: str, agent_id: str, cursor: dict[str, Any] | None) -> None:
        row = {
            "key": f"{pass_name}/{agent_id}",
            "pass_name": pass_name,
            "agent_id": agent_id,
            "cursor": None if cursor is None else json.dumps(cursor, sort_keys=True, default=str),
            "updated_at": utcnow(),
        }
        table = rows_to_table([row], CURSOR_SCHEMA)
        with_retry(
            lambda: (
                self.table.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(table)
            )
        )
        self.bound.wrote()

    def get_many(self, pass_name: str, agent_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The saved cursors of ``pass_name`` for ``agent_ids`` (one read per 1,000 agents), by agent; agents
        without one are left out."""
        out: dict[str, dict[str, Any]] = {}
        agents = list(agent_ids)
        for where in where_in("key", [f"{pass_name}/{a}" for a in agents]):
            for r in one_trip.read(self.table, where, columns=["agent_id", "cursor"]).to_pylist():
                if r["cursor"]:
                    out[r["agent_id"]] = json.loads(r["cursor"])
        return out

    def set_many(self, pass_name: str, cursors: dict[str, dict[str, Any]]) -> None:
        """Save the cursors of ``pass_name`` for several agents in one commit (none: no commit)."""
        if not cursors:
            return
        now = utcnow()
        rows = [
            {
                "key": f"{pass_name}/{agent_id}",
                "pass_name": pass_name,
                "agent_id": agent_id,
                "cursor": json.dumps(cursor, sort_keys=True, default=str),
                "updated_at": now,
            }
            for agent_id, cursor in sorted(cursors.items())
        ]
        table = rows_to_table(rows, CURSOR_SCHEMA)
        with_retry(
            lambda: (
                self.table.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(table)
            )
        )
        self.bound.wrote()

    def lease_holder(self, key: str) -> str | None:
        """The holder (JSON text) of lease ``key``, None when it is free; creates the free row on first use.

        Two processes that both create the row may leave two rows of the key (a racing ``merge_insert`` insert
        can duplicate a key); a swap from a holder updates every row it holds, and :meth:`swap_lease` takes a
        free lease only when no twin is held, so the held text, if any, is the holder.
        """
        cond = eq("key", LEASE_PREFIX + key)
        rows = self._texts(cond)
        if not rows:
            row = {"key": LEASE_PREFIX + key, "pass_name": LEASE_PREFIX, "agent_id": None, "cursor": None}
            table = rows_to_table([{**row, "updated_at": utcnow()}], CURSOR_SCHEMA)
            with_retry(lambda: self.table.merge_insert("key").when_not_matched_insert_all().execute(table))
            return self.lease_holder(key)
        held = [r for r in rows if r is not None]
        return held[0] if held else None

    def swap_lease(self, key: str, expected: str | None, holder: str | None) -> bool:
        """Compare-and-set lease ``key`` from ``expected`` (None: free) to ``holder``; True if it applied.

        A key may have twin rows (see :meth:`lease_holder`), and an update that raced the second insert leaves
        one held and one free: the lease is free only when no row of the key is held. Taking it looks before
        the update and again after it; a rival seen after means both took a free twin at once, and this run
        gives its row back (the rival, seeing it too, does the same, or saw none and keeps the lease).
        """
        rows = eq("key", LEASE_PREFIX + key)
        taking = holder if expected is None else None
        if taking is not None and self._holders(rows):
            return False
        cond = rows + (" AND cursor IS NULL" if expected is None else f" AND cursor = {lit(expected)}")
        result = with_retry(lambda: self.table.update(where=cond, values={"cursor": holder, "updated_at": utcnow()}))
        self.bound.wrote()
        if int(result.rows_updated) == 0:
            return False
        if taking is not None and self._holders(rows) - {taking}:
            mine = rows + f" AND cursor = {lit(taking)}"
            with_retry(lambda: self.table.update(where=mine, values={"cursor": None, "updated_at": utcnow()}))
            self.bound.wrote()
            return False
        return True

    def _holders(self, rows: str) -> frozenset[str]:
        return frozenset(h for h in self._texts(rows) if h is not None)

    def _texts(self, rows: str) -> list[str | None]:
        """The ``cursor`` text of every row matching ``rows`` (a lease key's rows, twins included)."""
        texts: list[str | None] = one_trip.read(self.table, rows, columns=["cursor"])["cursor"].to_pylist()
        return texts
