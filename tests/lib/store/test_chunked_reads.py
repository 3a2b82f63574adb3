"""Reads and deletes over a long list of ids go in chunks of ``store.sql.IN_CHUNK`` values and answer as one
query would: made small here (2), every list below spans several chunks, and a link between ids of two chunks
is read once. Every filtered read of these tests is watched: none may list more than ``IN_CHUNK`` values."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from engram_pipeline.store import MemoryStore, one_trip, sql

IDS = 7  # rows: four chunks of at most two


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql, "IN_CHUNK", 2)
    read = one_trip.read

    def watched(table: Any, where: str | None = None, **kwargs: Any) -> Any:
        for values in re.findall(r" IN \(([^)]*)\)", where or ""):
            assert values.count(",") < 2, f"a read lists more than IN_CHUNK values: {where}"
        return read(table, where, **kwargs)

    monkeypatch.setattr(one_trip, "read", watched)


def _rows(store: MemoryStore, n: int = IDS) -> list[dict[str, Any]]:
    rng = np.random.default_rng(n)
    rows = [store.engine.new_row("alice", f"note {i}") for i in range(n)]
    for r in rows:
        r["vector"] = rng.normal(size=store.embedder.dimension).tolist()
    store.engine.insert_rows(rows)
    return rows


def test_where_in_covers_every_value_once(small_chunks: None) -> None:
    assert sql.where_in("id", ["a", "b", "c"]) == ["id IN ('a', 'b')", "id IN ('c')"]
    assert sql.where_in("id", []) == []


def test_links_of_many_ids_are_each_read_once(store: MemoryStore, small_chunks: None) -> None:
    ids = [r["id"] for r in _rows(store)]
    chain = [
        {"agent_id": "alice", "src_id": a, "dst_id": b, "rel": "related", "score": 1.0}
        for a, b in zip(ids, ids[1:], strict=False)
    ]
    store.engine.add_links(chain)
    found = store.engine.links_of(ids)
    assert sorted((x["src_id"], x["dst_id"]) for x in found) == sorted((x["src_id"], x["dst_id"]) for x in chain)
    store.engine.add_links(chain, keyed=True)  # the keyed check reads them through the same chunks
    assert len(store.engine.links_of(ids)) == len(chain)
    store.engine.add_links(chain)  # unkeyed: every row is returned, as one query over all ids returns it
    assert len(store.engine.links_of(ids)) == 2 * len(chain)


def test_pending_access_of_many_ids_sums_each_read(store: MemoryStore, small_chunks: None) -> None:
    rows = _rows(store)
    store.engine.log_access(rows, times=2)
    store.engine.log_access(rows[:3])
    pending = store.engine.pending_access("alice", ids=[r["id"] for r in rows])
    times = dict(zip(pending["id"].to_list(), pending["times"].to_list(), strict=True))
    assert times == {r["id"]: 3 if i < 3 else 2 for i, r in enumerate(rows)}
    by_agents = store.engine.pending_access(["alice", "bob", "carol"], ids=[r["id"] for r in rows])
    assert by_agents.sort("id").equals(pending.sort("id"))


def test_closing_many_plans_reports_those_this_commit_closed(store: MemoryStore, small_chunks: None) -> None:
    agents = [f"agent-{i}" for i in range(5)]
    ids = store.engine.save_plans({a: {"clusters": []} for a in agents})
    first = agents[0]
    assert store.engine.close_plans([(first, ids[first], {"by": "earlier"})], "discarded") == {ids[first]}
    # one plan is closed already, so the commit updates four of five and reads back which (in chunks of 2)
    closing = [(a, ids[a], {"by": "now"}) for a in agents]
    assert store.engine.close_plans(closing, "discarded") == {ids[a] for a in agents[1:]}


def test_dropping_many_audit_events(store: MemoryStore, small_chunks: None) -> None:
    rows = _rows(store)
    events = [{"memory_id": r["id"], "agent_id": "alice", "action": "update", "before": r} for r in rows]
    store.engine.record_audit(events, actor="test", run_id="r1")
    recorded = store.engine.audit_for_agent("alice", actions=["update"])
    assert recorded.num_rows == IDS
    event_ids = recorded["event_id"].to_pylist()
    store.engine.drop_audit(event_ids[:5], shard=0)
    assert sorted(store.engine.audit_for_agent("alice", actions=["update"])["event_id"].to_pylist()) == sorted(
        event_ids[5:]
    )


def test_ids_written_by_one_commit(store: MemoryStore, small_chunks: None) -> None:
    """A compare-and-set commit finds the rows it wrote by the token it wrote on them (store/cas.py)."""
    rows = _rows(store)
    ids = [r["id"] for r in rows]
    changes = [{"id": r["id"], "version": r["version"], "importance": 0.9} for r in rows[:5]]
    assert sorted(store.engine.cas_write(changes, actor="test", action="update").applied) == sorted(ids[:5])
    (token,) = {r["write_token"] for r in store.engine.get_many(ids[:5], columns=["id", "write_token"])}
    version = store.engine.memories_version()
    assert sorted(store.engine.ids_written_at(version, ids, token)) == sorted(ids[:5])
