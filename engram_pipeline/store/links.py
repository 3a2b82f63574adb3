"""The links table: typed edges between memories (``duplicate-of``, ``contradicts``, ``derived-from``,
``supersedes``), appended one commit per batch."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from engram_pipeline.model import LINK_SCHEMA, rows_to_table, utcnow
from engram_pipeline.store import one_trip
from engram_pipeline.store.maintenance import FragmentBound
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.sql import chunked, eq, in_list, lit, where_in

Link = dict[str, Any]  # a row of LINK_SCHEMA


class Links:
    """The ``links`` table and its reads and writes."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.bound = FragmentBound(table)

    def add(self, links: Sequence[Link], *, run_id: str | None = None, keyed: bool = False) -> None:
        """Append links (``agent_id``, ``src_id``, ``dst_id``, ``rel``, ``score``) in one commit.

        ``keyed``: a link whose (``src_id``, ``dst_id``, ``rel``) is already stored is not added again, so a
        resumed pass that repeats a batch does not duplicate its links.
        """
        if keyed and links:
            have = {(r["src_id"], r["dst_id"], r["rel"]) for r in self.of([link["src_id"] for link in links])}
            links = [link for link in links if (link["src_id"], link["dst_id"], link["rel"]) not in have]
        if not links:
            return
        now = utcnow()
        rows = [{"created_at": now, "run_id": run_id, **link} for link in links]
        table = rows_to_table(rows, LINK_SCHEMA)
        if keyed:
            on = ["src_id", "dst_id", "rel"]
            with_retry(lambda: self.table.merge_insert(on).when_not_matched_insert_all().execute(table))
        else:
            with_retry(lambda: self.table.add(table))
        self.bound.wrote()

    def drop(self, *, src_id: str, dst_id: str, rel: str) -> None:
        """Remove the links ``src_id -rel-> dst_id`` (one commit; none there is a no-op)."""
        where = f"{eq('src_id', src_id)} AND {eq('dst_id', dst_id)} AND {eq('rel', rel)}"
        if self.table.count_rows(where):
            with_retry(lambda: self.table.delete(where))
            self.bound.wrote()

    def of(self, memory_ids: Iterable[str], *, rel: str | None = None) -> list[Link]:
        """The links from or to any of ``memory_ids`` (of relation ``rel`` if given)."""
        found: list[Link] = []
        earlier: set[str] = set()  # a link between two chunks is read by both: kept from the first
        for part in chunked(list(memory_ids)):
            where = f"(src_id IN {in_list(part)} OR dst_id IN {in_list(part)})"
            if rel is not None:
                where += f" AND rel = {lit(rel)}"
            rows = one_trip.read(self.table, where).to_pylist()
            found += [x for x in rows if x["src_id"] not in earlier and x["dst_id"] not in earlier]
            earlier.update(part)
        return found

    def for_agent(self, agent_id: str | Sequence[str]) -> pa.Table:
        """The links of ``agent_id``, or of every agent of a sequence (read in chunks of 1,000 agents)."""
        if isinstance(agent_id, str):
            return one_trip.read(self.table, eq("agent_id", agent_id))
        agents = sorted(set(agent_id))
        parts = [one_trip.read(self.table, where) for where in where_in("agent_id", agents)]
        return pa.concat_tables(parts) if parts else LINK_SCHEMA.empty_table()
