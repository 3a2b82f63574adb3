"""One convention across the shells: the same defaults, the same option for an agent, real choices, a version."""

from __future__ import annotations

import inspect

from engram_pipeline.api.__main__ import build_parser
from engram_pipeline.cli import services
from engram_pipeline.client import EngramClient
from engram_pipeline.settings import API_PORT, DEFAULT_API_URL


def test_one_default_port_for_the_server_the_module_entry_and_the_client() -> None:
    serve_port = inspect.signature(services.serve).parameters["port"].default
    client_url = inspect.signature(EngramClient).parameters["base_url"].default
    assert serve_port == build_parser().get_default("port") == API_PORT
    assert client_url == DEFAULT_API_URL and client_url.endswith(f":{API_PORT}")
