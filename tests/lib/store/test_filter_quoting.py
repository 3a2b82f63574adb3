"""Every value placed into a LanceDB filter is quoted: hostile agent ids and tags never reach other agents."""

from __future__ import annotations

import pytest

from engram_pipeline.store import MemoryStore
from engram_pipeline.store.sql import in_list, lit

HOSTILE = [
    "o'brien",
    "x' OR 1=1 --",
    "' OR agent_id <> '",
    "100%",
    "a_b%",
    "back\\slash",
    "trailing\\",
    "üñîçødé-агент-エージェント",
    "quote''twice",
    'double"quote',
    "semi;colon; DROP TABLE memories",
]


def test_lit_doubles_single_quotes() -> None:
    assert lit("it's") == "'it''s'"
    assert in_list(["a", "b'c"]) == "('a', 'b''c')"
    with pytest.raises(ValueError):
        lit("nul\x00byte")


@pytest.mark.parametrize("agent", HOSTILE)
def test_hostile_agent_ids_read_and_write_only_their_own_rows(store: MemoryStore, agent: str) -> None:
    victim = store.remember("victim", "victim's private memory about apples", tags=["secret"]).memory
    mine = store.remember(agent, "my memory about apples", tags=[agent]).memory
    assert [r["id"] for r in store.list_memories(agent)] == [mine["id"]]
    assert [h.memory["id"] for h in store.recall(agent, "apples", k=10)] == [mine["id"]]
    assert [r["id"] for r in store.list_memories(agent, tag=agent)] == [mine["id"]]
    assert store.list_memories("victim", tag=agent) == []
    assert store.engine.scan(agent).num_rows == 1
    # Writes through the agent's filters leave the victim untouched.
    store.update(mine["id"], expected_version=1, agent_id=agent, importance=0.9)
    assert store.get(victim["id"], track_access=False) == victim
    assert agent in store.agents()


@pytest.mark.parametrize("tag", HOSTILE)
def test_hostile_tags_match_exactly(store: MemoryStore, tag: str) -> None:
    tagged = store.remember("alice", "tagged memory", tags=[tag]).memory
    store.remember("alice", "untagged memory")
    assert [r["id"] for r in store.list_memories("alice", tag=tag)] == [tagged["id"]]


def test_hostile_memory_ids(store: MemoryStore) -> None:
    row = store.remember("alice", "has a hostile id", memory_id="id' OR '1'='1").memory
    other = store.remember("alice", "plain id").memory
    assert [r["id"] for r in store.get_many([row["id"]])] == [row["id"]]
    store.delete(row["id"])
    assert store.get(other["id"], track_access=False)["id"] == other["id"]
