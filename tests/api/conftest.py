"""API fixtures: the app around a temporary store, with three keys (two agents' and an admin's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_helpers import KEYS
from fastapi.testclient import TestClient

from engram_pipeline.api import create_app
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore


@pytest.fixture
def api_settings(settings: Settings) -> Settings:
    return settings.replace(api_keys=KEYS)


@pytest.fixture
def api_store(store_uri: str, api_settings: Settings) -> MemoryStore:
    return MemoryStore.open(store_uri, settings=api_settings)


@pytest.fixture
def client(api_store: MemoryStore) -> Iterator[TestClient]:
    # access bookkeeping inline (interval 0) so a test can read the counts right after a request
    app = create_app(api_store, access_interval_s=0)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c
