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


def test_choices_are_the_models_and_help_lists_them(cli) -> None:  # type: ignore[no-untyped-def]
    from typing import get_args

    from engram_pipeline.cli import _common
    from engram_pipeline.model import CONFIDENCE_TIERS, KINDS, OUTCOMES, SOURCES, TIERS

    assert get_args(_common.Kind) == KINDS and get_args(_common.Source) == SOURCES
    assert get_args(_common.Outcome) == OUTCOMES and get_args(_common.StoreTier) == TIERS
    assert get_args(_common.WriteTier) == (*TIERS, "auto")
    assert [t.value for t in _common.ConfidenceTier] == list(CONFIDENCE_TIERS)
    shown = " ".join(cli("remember", "--help").output.split())
    assert "<episodic|semantic|" in shown and "<user|agent|tool|" in shown and "<success|failure>" in shown
    assert "recent|full" in " ".join(cli("consolidate", "--help").output.split())


def test_every_lifecycle_pass_has_a_command(cli) -> None:  # type: ignore[no-untyped-def]
    commands = " ".join(cli("--help").output.split())
    for name in ("decay", "decay-confidence", "promote", "contradictions", "neighbour-graph", "consolidate-corpus",
                 "consolidate", "health", "maintain"):  # fmt: skip
        assert f" {name} " in commands, name


def test_an_agent_is_named_with_agent_everywhere(cli) -> None:  # type: ignore[no-untyped-def]
    made = cli("remember", "--agent", "alice", "User lives in Berlin", json_=True)
    assert made.exit_code == 0, made.output
    assert cli("remember", "bob", "Bob's older positional form still works").exit_code == 0  # hidden alias
    for command in ("remember", "recall"):
        usage = cli(command, "--help").output
        assert "--agent" in usage and "legacy" not in usage
    hits = cli("recall", "--agent", "alice", "where does the user live", json_=True)
    assert hits.exit_code == 0 and len(__import__("json").loads(hits.stdout)) == 1
    missing = cli("recall", "where does the user live")
    assert missing.exit_code == 1 and "give --agent AGENT" in missing.stderr
    for command in ("decay", "contradictions", "neighbour-graph", "export"):
        assert "--agent" in cli(command, "--help").output


def test_version(cli) -> None:  # type: ignore[no-untyped-def]
    from importlib.metadata import version

    result = cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"engram {version('engram-pipeline')}"


def test_contradictions_and_neighbour_graph_commands(cli) -> None:  # type: ignore[no-untyped-def]
    import json

    for text in ("User lives in Berlin", "User lives in Munich", "User likes tea"):
        assert cli("remember", "--agent", "alice", text).exit_code == 0
    (graph,) = json.loads(cli("neighbour-graph", "--agent", "alice", json_=True).stdout)
    assert graph["agent_id"] == "alice" and graph["report"]["pairs"] >= 0 and 0 < graph["report"]["floor"] < 1
    (found,) = json.loads(cli("contradictions", "--agent", "alice", json_=True).stdout)
    assert {"scanned", "flagged", "skipped_concurrent_edit"} <= set(found["report"])
    unknown = cli("contradictions", "--agent", "ghost")
    assert unknown.exit_code == 1 and "unknown agent 'ghost'" in unknown.stderr
