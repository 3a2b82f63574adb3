"""Commands that start something: the HTTP API, the MCP server, the demo and the Dagster UI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from engram_pipeline.cli._common import CliError, library, state
from engram_pipeline.settings import API_HOST, API_PORT


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="interface to bind")] = API_HOST,
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port")] = API_PORT,
) -> None:
    """Serve the memory API (FastAPI, /v1, OpenAPI at /openapi.json)."""
    library("engram_pipeline.api", "serve", what="engram serve")(host, port, state(ctx).settings)


def mcp(
    ctx: typer.Context,
    agent: Annotated[str, typer.Option("--agent", help="the agent the tools act as")],
    admin: Annotated[bool, typer.Option("--admin", help="let consolidate_corpus apply reviewed merge plans")] = False,
) -> None:
    """Run the MCP server (stdio) for one agent."""
    library("engram_pipeline.api.mcp_server", "run_mcp", what="engram mcp")(agent, state(ctx).settings, admin=admin)


def demo(
    ctx: typer.Context,
    import_only: Annotated[
        bool, typer.Option("--import-only", help="only import the sample corpus and print a recall per agent")
    ] = False,
    apply_merges: Annotated[bool, typer.Option("--apply-merges", help="also apply each agent's merge plan")] = False,
) -> None:
    """Run the whole pipeline through Dagster on the bundled sample corpus (four agents), then summarise.

    The one demo lives in the ``assets`` code location (``python -m assets.demo``, what ``make demo`` runs),
    started as a child process so that the library never imports Dagster; its output is passed through.
    """
    st = state(ctx)
    env = dict(os.environ)
    if st.db:
        env["ENGRAM_DB_URI"] = st.db
    flags = [*(["--import-only"] if import_only else []), *(["--apply-merges"] if apply_merges else [])]
    with subprocess.Popen(
        [sys.executable, "-m", "assets.demo", *flags], env=env, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            typer.echo(line, nl=False)
    raise typer.Exit(child.returncode)


def ui(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port of the UI")] = 3000,
    workspace: Annotated[Path, typer.Option(help="Dagster workspace file")] = Path("workspace.yaml"),
) -> None:
    """Start the Dagster UI and daemon (`dagster dev`) on 127.0.0.1, with DAGSTER_HOME under ENGRAM_HOME; Ctrl-C
    or SIGTERM stops it and every process it started within seconds.

    The Dagster side lives in the ``assets`` code location (``python -m assets.ui``); this process becomes it
    (exec), so that signals reach it directly and the library never imports Dagster.
    """
    st = state(ctx)
    if not workspace.is_file():
        raise CliError(f"{workspace} not found: run `engram ui` from the project root or pass --workspace")
    env = dict(os.environ)
    if st.db:
        env["ENGRAM_DB_URI"] = st.db
    args = [sys.executable, "-m", "assets.ui", "--port", str(port), "--workspace", str(workspace.resolve())]
    os.execve(sys.executable, args, env)
