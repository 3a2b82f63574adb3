"""Fixtures for the Dagster code location: a seeded store on a temporary directory, resources bound to it,
and an ephemeral Dagster instance with the store's agents registered as partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from assets.partitions import AGENTS
from assets.resources import EngramStore, RunScopedIOManager
from engram_pipeline.importer import import_jsonl
from engram_pipeline.sample import generate_sample_corpus
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore


@pytest.fixture
def seeded_uri(tmp_path: Path, settings: Settings) -> str:
    """A store holding the sample corpus (four agents), built from scratch for each test."""
    uri = str(tmp_path / "store")
    # exact dedup only: the corpus holds near-duplicates and contradictions for the passes to find
    import_jsonl(MemoryStore.open(uri, settings=settings), generate_sample_corpus(), checks="exact")
    return uri


@pytest.fixture
def seeded(seeded_uri: str, settings: Settings) -> MemoryStore:
    return MemoryStore.open(seeded_uri, settings=settings)


@pytest.fixture
def engram(seeded_uri: str) -> EngramStore:
    return EngramStore(uri=seeded_uri, embedder="hashing")


@pytest.fixture
def resources(engram: EngramStore, tmp_path: Path) -> dict[str, Any]:
    return {"engram": engram, "run_scoped_io_manager": RunScopedIOManager(base_dir=str(tmp_path / "io"))}


@pytest.fixture
def instance(seeded: MemoryStore) -> DagsterInstance:
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(AGENTS, seeded.agents())
    return instance
