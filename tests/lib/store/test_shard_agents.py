"""The agents a shard's sweep runs over: every agent in exactly one shard, by the stable hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_pipeline.lifecycle.sweep import sweep
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.sharding import by_shard

SHARDS = 3


@pytest.fixture
def sharded(tmp_path: Path) -> MemoryStore:
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(SHARDS)})
    store = MemoryStore.open(str(tmp_path / "store"), settings=settings)
    for n in range(12):
        store.remember(f"agent-{n}", f"Agent {n} prefers tea")
    return store


def test_the_shards_partition_the_agents(sharded: MemoryStore) -> None:
    shards = [sharded.engine.agents_in_shard(k) for k in range(SHARDS)]
    assert sorted(a for agents in shards for a in agents) == sharded.agents()  # each agent once
    assert {k: agents for k, agents in enumerate(shards) if agents} == by_shard(sharded.agents(), SHARDS)


def test_a_shard_sweep_reports_its_agents(sharded: MemoryStore) -> None:
    agents = sharded.engine.agents_in_shard(1)
    assert sorted(sweep(sharded, "health", agents).agents) == agents


@pytest.mark.parametrize("shard", [-1, SHARDS])
def test_a_shard_outside_the_store_is_refused(sharded: MemoryStore, shard: int) -> None:
    with pytest.raises(ValueError, match=rf"shard must be in \[0, {SHARDS}\); got {shard}"):
        sharded.engine.agents_in_shard(shard)
