"""Each pass of the registry has one entry in the table of its public names, and the CLI and the HTTP API publish
the passes under those names (the code location's assets: tests/assets/test_definitions.py)."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from engram_pipeline.api.routes.agents import router
from engram_pipeline.cli import app
from engram_pipeline.lifecycle.passes import PASSES
from engram_pipeline.pass_names import PASS_NAMES


def test_every_pass_of_the_registry_has_its_public_names() -> None:
    assert list(PASS_NAMES) == list(PASSES)
    assert all(p.public is PASS_NAMES[name] for name, p in PASSES.items())


def test_the_cli_and_the_api_publish_the_passes_under_those_names() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    commands = {n.command for n in PASS_NAMES.values()} - {None}
    assert commands == {"promote", "decay", "decay-confidence", "contradictions", "consolidate",
                        "consolidate-corpus", "health"}  # fmt: skip
    assert commands <= set(group.commands)
    paths = {r.path for r in router.routes}  # type: ignore[attr-defined]
    routes = {f"/v1/agents/{{agent_id}}/{n.route}" for n in PASS_NAMES.values() if n.route}
    assert {r.rsplit("/", 1)[1] for r in routes} == {"promote", "decay", "consolidate", "corpus-merge", "health"}
    assert routes <= paths
