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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shards",
        type=int,
        default=int(os.environ.get("ENGRAM_TEST_SHARDS", "1")),
        help="ENGRAM_SHARDS of the stores the `settings`, `store` and `seed_store` fixtures open "
        "(default: $ENGRAM_TEST_SHARDS or 1)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist with ``--dist loadgroup`` (``make test``) every test that starts the local cluster runs
    on one worker, one after another, so the session starts one cluster (Postgres, Redis, Ceph RGW), not one per
    worker, and two tests never contend for it. A test that uses the cluster must say so (marker
    ``distributed``), or ``make test-fast`` would start the cluster and ``make test`` a second one."""
    for item in items:
        uses_cluster = "cluster" in getattr(item, "fixturenames", ())
        if uses_cluster and not item.get_closest_marker("distributed"):
            raise pytest.UsageError(f"{item.nodeid} uses the local cluster: mark it distributed")
        if item.get_closest_marker("distributed"):
            item.add_marker(pytest.mark.xdist_group("cluster"))


@pytest.fixture
def shards(request: pytest.FixtureRequest) -> str:
    """The shard count of the fixtures' stores (``--shards``), as ``ENGRAM_SHARDS`` reads it."""
    return str(request.config.getoption("--shards"))


@pytest.fixture
def settings(shards: str) -> Settings:
    return Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": shards})


@pytest.fixture
def seed_store(store_uri: str, shards: str) -> MemoryStore:
    """A store under the `seed` retention policy."""
    env = {"ENGRAM_EMBEDDER": "hashing", "ENGRAM_SHARDS": shards, **SEED_POLICY}
    return MemoryStore.open(store_uri, settings=Settings.from_env(env))


@pytest.fixture
def store_uri(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def store(store_uri: str, settings: Settings) -> MemoryStore:
    return MemoryStore.open(store_uri, settings=settings)
