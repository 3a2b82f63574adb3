"""Shared fixtures: a real LanceDB store in a temporary directory, with the deterministic hashing embedder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# Under CI the property tests run the same examples every time (a failure reproduces; exploration happens
# in development runs, where examples are random).
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402
from tests.constants import SEED_POLICY  # noqa: E402


@pytest.fixture
def settings() -> Settings:
    return Settings.from_env({"ENGRAM_EMBEDDER": "hashing"})


@pytest.fixture
def seed_store(store_uri: str) -> MemoryStore:
    """A store under the `seed` retention policy."""
    return MemoryStore.open(store_uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **SEED_POLICY}))


@pytest.fixture
def store_uri(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def store(store_uri: str, settings: Settings) -> MemoryStore:
    return MemoryStore.open(store_uri, settings=settings)
