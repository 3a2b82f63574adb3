"""Property-based run of the OpenAPI schema (schemathesis): no input produces a server error or a response
that violates the schema, and schema-invalid input is refused.

Bounded: a few examples per operation and generation mode, against the app in process (ASGI) over a
store opened by the app's own lifespan (in memory, so nothing touches the disk) and seeded with a few
memories; requests are authenticated as admin so that every route is reached.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from api_helpers import ADMIN, KEYS
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from engram_pipeline.api import create_app
from engram_pipeline.settings import Settings

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

app = create_app(
    settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", "ENGRAM_DB_URI": "memory://", "ENGRAM_API_KEYS": KEYS}),
    access_interval_s=0,
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.fixture(scope="module", autouse=True)
def running_app() -> Iterator[None]:
    with TestClient(app):  # the lifespan opens the store
        store = app.state.engram.store
        for agent in ("alice", "bob"):
            for text in ("User prefers dark mode", "Deploys happen on Fridays", "Meeting today at 3pm"):
                store.remember(agent, text)
        yield


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=ADMIN, checks=CHECKS)
