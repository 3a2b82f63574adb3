"""Rung 3 for the shard jobs: the shard assets materialised over a multi-agent store on four shards, with
resources bound to a temporary directory (a report covers exactly that shard's agents, and no other agent's
rows change), and the code location's own shard job run over each of its shards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, Definitions, materialize

from assets.definitions import defs
from assets.partitions import shard_keys, shard_partitions
from assets.resources import EngramStore, RunScopedIOManager
from assets.shard_assets import shard_key, shard_sweeps
from engram_pipeline.importer import import_jsonl
from engram_pipeline.lifecycle._common import sweep_key
from engram_pipeline.sample import AGENTS, load_sample_corpus
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.sharding import by_shard

SHARDS = 4
COPIES = 3  # each sample agent three times: 12 agents over 4 shards


@pytest.fixture
def sharded_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store of 12 agents (copies of the sample agents), with ENGRAM_SHARDS=4 in the environment the resource
    reads its settings from."""
    monkeypatch.setenv("ENGRAM_SHARDS", str(SHARDS))
    uri = str(tmp_path / "store")
    lines = []
    for line in load_sample_corpus():
        for copy in range(COPIES):
            agent = f"{line['agent_id']}-{copy}"
            lines.append({**line, "agent_id": agent, **({"id": f"{agent}-{line['id']}"} if line.get("id") else {})})
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(SHARDS)})
    import_jsonl(MemoryStore.open(uri, settings=settings), lines, checks="exact")
    return uri


def busiest_shard(agents: list[str]) -> tuple[str, list[str]]:
    """A shard with at least two agents (and not every agent), as (partition key, its agents)."""
    groups = by_shard(agents, SHARDS)
    shard, members = max(groups.items(), key=lambda kv: len(kv[1]))
    assert 2 <= len(members) < len(agents)
    return str(shard), members


def materialize_shard(uri: str, tmp_path: Path, names: list[str], shard: str, runs: list[str] | None = None) -> Any:
    resources = {
        "engram": EngramStore(uri=uri, embedder="hashing"),
        "run_scoped_io_manager": RunScopedIOManager(base_dir=str(tmp_path / "io")),
    }
    assets = shard_sweeps(shard_partitions(SHARDS))
    result = materialize(assets, selection=[shard_key(n) for n in names], partition_key=shard, resources=resources)
    assert result.success
    if runs is not None:
        runs.append(result.run_id)
    return {e.asset_key: e.materialization.metadata for e in result.get_asset_materialization_events()}


@pytest.mark.slow
def test_a_shard_run_sweeps_exactly_its_agents(sharded_uri: str, tmp_path: Path) -> None:
    store = MemoryStore.open(
        sharded_uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(SHARDS)})
    )
    agents = store.agents()
    assert len(agents) == len(AGENTS) * COPIES
    shard, members = busiest_shard(agents)
    others = {a: store.engine.scan(a).to_pylist() for a in agents if a not in members}

    runs: list[str] = []
    metadata = materialize_shard(sharded_uri, tmp_path, ["stm_promotion", "importance_decay"], shard, runs)

    decay = metadata[AssetKey(["shards", "importance_decay"])]
    assert decay["agents"].value == len(members)
    assert decay["processed"].value == sum(store.engine.scan(a).num_rows for a in members)  # decay re-scores every row
    table = decay["agents_table"].value
    assert all(f"| {a} |" in table for a in members) and not any(f"| {a} |" in table for a in others)
    assert f"over {len(members)} agents" in decay["summary"].value
    assert others == {a: store.engine.scan(a).to_pylist() for a in others}  # other shards' agents untouched
    cursor = store.engine.get_cursor("ltm_decay", sweep_key(members, SHARDS)[0])
    assert cursor is not None and cursor["run_id"] == runs[0]  # the shard's cursor names the Dagster run


@pytest.mark.slow
def test_the_full_pipeline_of_a_shard_reports_per_agent_figures(sharded_uri: str, tmp_path: Path) -> None:
    store = MemoryStore.open(
        sharded_uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": str(SHARDS)})
    )
    shard, members = busiest_shard(store.agents())

    (metadata,) = materialize_shard(sharded_uri, tmp_path, ["pipeline"], shard).values()

    assert metadata["agents"].value == len(members)
    assert metadata["health.total"].value == sum(store.engine.scan(a).num_rows for a in members)
    rows = [line for line in metadata["agents_table"].value.splitlines() if line.startswith("| ") and "---" not in line]
    assert sorted(line.split(" | ")[0][2:] for line in rows[1:]) == members  # a row per agent, after the header


def test_the_code_locations_shard_job_runs_over_its_shards(resources: dict[str, Any], seeded: MemoryStore) -> None:
    location = Definitions(assets=defs.assets, jobs=defs.jobs, resources=resources)
    job = location.resolve_job_def("decay_shard_job")
    shards = Settings.from_env().shards
    swept: list[str] = []
    for key in shard_keys(shards):
        result = job.execute_in_process(partition_key=key)
        assert result.success
        metadata = {e.asset_key: e.materialization.metadata for e in result.get_asset_materialization_events()}
        assert set(metadata) == {shard_key("importance_decay"), shard_key("confidence_decay")}
        assert metadata[shard_key("importance_decay")]["agents"].value == len(seeded.engine.agents_in_shard(int(key)))
        swept += seeded.engine.agents_in_shard(int(key))
    assert sorted(swept) == seeded.agents()
