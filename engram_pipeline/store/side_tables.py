"""The shards' routing and the side tables' verbs: audit, links, plans, cursors and leases, the access log.

A store is :attr:`SideTables.shard_count` shards, each a :class:`~engram_pipeline.store.shards.Shard` holding
``memories`` and one collaborator per side table. A side row names its agent (``agent_id``) and goes to that
agent's shard; a read by memory or plan id looks in every shard (all of one memory's events and links are in
its agent's shard); a sweep's list of agents is read shard by shard. This class is that fan-out, written once;
:class:`~engram_pipeline.store.core.ShardedEngine` adds the ``memories`` verbs and opens the shards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import polars as pl
import pyarrow as pa

from engram_pipeline.model import AUDIT_SCHEMA, LINK_SCHEMA, Memory, PlanStatus
from engram_pipeline.store.audit import AuditEvent
from engram_pipeline.store.cursors import Cursors, lease_agent
from engram_pipeline.store.errors import PlanNotFound
from engram_pipeline.store.links import Link
from engram_pipeline.store.plans import Plan, Plans
from engram_pipeline.store.sharding import by_shard, shard_of
from engram_pipeline.store.shards import Shard
from engram_pipeline.store.sql import chunked


class SideTables:
    """The shards and the side tables' verbs over them (the base of the engine, which sets the two below)."""

    shards: tuple[Shard, ...]
    shard_count: int

    # -- routing ---------------------------------------------------------------------------------------
    def shard_of(self, agent_id: str) -> int:
        """The shard holding ``agent_id``'s rows (a stable hash: :func:`engram_pipeline.store.sharding.shard_of`)."""
        return 0 if self.shard_count == 1 else shard_of(agent_id, self.shard_count)

    def shard_for(self, agent_id: str) -> Shard:
        """The :class:`Shard` holding ``agent_id``'s rows (for the store's own modules)."""
        return self.shards[self.shard_of(agent_id)]

    def _group(self, rows: Sequence[Memory]) -> dict[int, list[Memory]]:
        """``rows`` (each with ``agent_id``) by shard, in order."""
        if self.shard_count == 1:
            return {0: list(rows)}
        out: dict[int, list[Memory]] = {}
        for r in rows:
            out.setdefault(self.shard_of(r["agent_id"]), []).append(r)
        return out

    # -- the side tables' verbs, as callers know them ----------------------------------------------------
    def record_audit(self, events: Sequence[AuditEvent], *, actor: str, run_id: str | None = None) -> None:
        """See :meth:`AuditLog.record` (one commit per shard the events fall in)."""
        for k, group in self._group(events).items():
            self.shards[k].audit.record(group, actor=actor, run_id=run_id)

    def drop_audit(self, event_ids: Sequence[str], *, shard: int) -> None:
        """See :meth:`AuditLog.drop`."""
        self.shards[shard].audit.drop(event_ids)

    def audit_events(self, memory_id: str) -> list[AuditEvent]:
        """Every audit event of one memory, oldest first."""
        events = [e for shard in self.shards for e in shard.audit.events(memory_id)]
        return sorted(events, key=lambda r: (r["at"], r["event_id"])) if self.shard_count > 1 else events

    def last_pre_image(self, memory_id: str) -> tuple[Memory, AuditEvent] | None:
        """The pre-image of the newest event that took the row out of recall, and that event."""
        for shard in self.shards:
            found = shard.audit.last_pre_image(memory_id)
            if found is not None:
                return found
        return None

    def audited(self, memory_ids: Sequence[str], *, action: str, run_id: str) -> set[str]:
        """Which of ``memory_ids`` have an ``action`` event of run ``run_id``."""
        return {i for shard in self.shards for i in shard.audit.audited(memory_ids, action=action, run_id=run_id)}

    def audit_for_agent(
        self,
        agent_id: str | Sequence[str],
        *,
        actions: Iterable[str] | None = None,
        memory_ids: Sequence[str] | None = None,
        where: str | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The agent's audit events, or those of every agent of a sequence (a sweep), shard by shard; see
        :meth:`AuditLog.for_agent`."""
        if isinstance(agent_id, str):
            audit = self.shard_for(agent_id).audit
            return audit.for_agent(agent_id, actions=actions, memory_ids=memory_ids, where=where, columns=columns)
        parts = [
            self.shards[k].audit.for_agent(part, actions=actions, memory_ids=memory_ids, where=where, columns=columns)
            for k, group in by_shard(agent_id, self.shard_count).items()
            for part in chunked(group)
        ]
        if not parts:
            return AUDIT_SCHEMA.empty_table().select(list(columns or AUDIT_SCHEMA.names))
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def add_links(self, links: Sequence[Link], *, run_id: str | None = None, keyed: bool = False) -> None:
        """See :meth:`Links.add` (one commit per shard the links' agents fall in)."""
        for k, group in self._group(links).items():
            self.shards[k].links.add(group, run_id=run_id, keyed=keyed)

    def links_of(self, memory_ids: Iterable[str], *, rel: str | None = None) -> list[Link]:
        ids = list(memory_ids)
        return [link for shard in self.shards for link in shard.links.of(ids, rel=rel)]

    def links_for_agent(self, agent_id: str | Sequence[str]) -> pa.Table:
        """The links of one agent, or of every agent in a sequence of ids (a sweep), shard by shard."""
        if isinstance(agent_id, str):
            return self.shard_for(agent_id).links.for_agent(agent_id)
        parts = [self.shards[k].links.for_agent(group) for k, group in by_shard(agent_id, self.shard_count).items()]
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0] if parts else LINK_SCHEMA.empty_table()

    def drop_links(self, agent_id: str, *, src_id: str, dst_id: str, rel: str) -> None:
        """See :meth:`Links.drop` (the links of ``agent_id``'s rows)."""
        self.shard_for(agent_id).links.drop(src_id=src_id, dst_id=dst_id, rel=rel)

    def save_plan(
        self, agent_id: str, body: dict[str, Any], *, kind: str = "corpus_merge", run_id: str | None = None
    ) -> str:
        return self.shard_for(agent_id).plans.save(agent_id, body, kind=kind, run_id=run_id)

    def save_plans(
        self, bodies: Mapping[str, dict[str, Any]], *, kind: str = "corpus_merge", run_id: str | None = None
    ) -> dict[str, str]:
        """One pending plan per agent (``{agent_id: body}``), one commit per shard they fall in: their ids."""
        ids: dict[str, str] = {}
        for k, agents in by_shard(bodies, self.shard_count).items():
            ids.update(self.shards[k].plans.save_many({a: bodies[a] for a in agents}, kind=kind, run_id=run_id))
        return ids

    def _plan_shard(self, plan_id: str) -> tuple[Plans, Plan] | None:
        for shard in self.shards:
            plan = shard.plans.get(plan_id)
            if plan is not None:
                return shard.plans, plan
        return None

    def get_plan(self, plan_id: str) -> Plan | None:
        found = self._plan_shard(plan_id)
        return None if found is None else found[1]

    def latest_plan(
        self, agent_id: str, *, kind: str = "corpus_merge", status: PlanStatus | None = None
    ) -> Plan | None:
        return self.shard_for(agent_id).plans.latest(agent_id, kind=kind, status=status)

    def plans_of(self, agent_id: str, *, kind: str = "corpus_merge", status: PlanStatus | None = None) -> list[Plan]:
        return self.shard_for(agent_id).plans.of(agent_id, kind=kind, status=status)

    def plans_of_agents(
        self, agent_ids: Iterable[str], *, kind: str = "corpus_merge", status: PlanStatus | None = None
    ) -> dict[str, list[Plan]]:
        """:meth:`plans_of` for many agents, one read per shard (and 1,000 agents): ``{agent: plans}``, oldest
        first, an agent without such plans left out."""
        out: dict[str, list[Plan]] = {}
        for k, agents in by_shard(agent_ids, self.shard_count).items():
            out.update(self.shards[k].plans.of_agents(agents, kind=kind, status=status))
        return out

    def latest_plans(
        self, agent_ids: Iterable[str], *, kind: str = "corpus_merge", status: PlanStatus | None = None
    ) -> dict[str, Plan]:
        """:meth:`latest_plan` for many agents in one read per shard: ``{agent: newest plan}``."""
        return {a: plans[-1] for a, plans in self.plans_of_agents(agent_ids, kind=kind, status=status).items()}

    def mark_plan_applied(self, plan_id: str, result: dict[str, Any]) -> None:
        found = self._plan_shard(plan_id)
        if found is None:
            raise PlanNotFound(plan_id)
        found[0].mark_applied(plan_id, result)

    def close_plan(self, plan_id: str, status: PlanStatus, note: dict[str, Any]) -> bool:
        """See :meth:`Plans.close`."""
        found = self._plan_shard(plan_id)
        return found is not None and found[0].close(plan_id, status, note)

    def close_plans(self, closing: Sequence[tuple[str, str, dict[str, Any]]], status: PlanStatus) -> set[str]:
        """:meth:`close_plan` for each ``(agent_id, plan_id, note)``, one compare-and-set commit per shard; the
        ids it closed."""
        closed: set[str] = set()
        for k, agents in by_shard({a for a, _, _ in closing}, self.shard_count).items():
            mine = set(agents)
            notes = {plan_id: note for a, plan_id, note in closing if a in mine}
            closed |= self.shards[k].plans.close_many(notes, status)
        return closed

    def get_cursor(self, pass_name: str, agent_id: str) -> dict[str, Any] | None:
        return self.shard_for(agent_id).cursors.get(pass_name, agent_id)

    def set_cursor(self, pass_name: str, agent_id: str, cursor: dict[str, Any] | None) -> None:
        self.shard_for(agent_id).cursors.set(pass_name, agent_id, cursor)

    def get_cursors(self, pass_name: str, agent_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """:meth:`get_cursor` for several agents at once (one read per shard), by agent; none saved: left out."""
        out: dict[str, dict[str, Any]] = {}
        for k, group in by_shard(agent_ids, self.shard_count).items():
            out.update(self.shards[k].cursors.get_many(pass_name, group))
        return out

    def set_cursors(self, pass_name: str, cursors: dict[str, dict[str, Any]]) -> None:
        """:meth:`set_cursor` for several agents at once (one commit per shard they fall in)."""
        for k, group in by_shard(cursors, self.shard_count).items():
            self.shards[k].cursors.set_many(pass_name, {a: cursors[a] for a in group})

    def _lease_cursors(self, key: str) -> Cursors:
        agent_id = lease_agent(key)
        return self.shard_for(agent_id).cursors if agent_id is not None else self.shards[0].cursors

    def lease_holder(self, key: str) -> str | None:
        return self._lease_cursors(key).lease_holder(key)

    def swap_lease(self, key: str, expected: str | None, holder: str | None) -> bool:
        return self._lease_cursors(key).swap_lease(key, expected, holder)

    def log_access(self, rows: Sequence[Memory], *, times: int | Sequence[int] = 1, at: datetime | None = None) -> None:
        """See :meth:`AccessLog.log` (one append per shard the rows fall in)."""
        if self.shard_count == 1:
            self.shards[0].access_log.log(rows, times=times, at=at)
            return
        counts = [times] * len(rows) if isinstance(times, int) else list(times)
        by_shard: dict[int, list[int]] = {}
        for i, r in enumerate(rows):
            by_shard.setdefault(self.shard_of(r["agent_id"]), []).append(i)
        for k, index in by_shard.items():
            self.shards[k].access_log.log([rows[i] for i in index], times=[counts[i] for i in index], at=at)

    def pending_access(
        self, agent_id: str | Sequence[str] | None = None, *, ids: Sequence[str] | None = None
    ) -> pl.DataFrame:
        """See :meth:`AccessLog.pending` (a sequence of agents: a sweep's, read shard by shard)."""
        if isinstance(agent_id, str):
            return self.shard_for(agent_id).access_log.pending(agent_id, ids=ids)
        if agent_id is None:
            parts = [shard.access_log.pending(ids=ids) for shard in self.shards]
        else:
            groups = by_shard(agent_id, self.shard_count).items()
            parts = [self.shards[k].access_log.pending(group, ids=ids) for k, group in groups]
            if not parts:
                return self.shards[0].access_log.pending([], ids=ids)
        return parts[0] if len(parts) == 1 else pl.concat(parts).sort("id", "version")
