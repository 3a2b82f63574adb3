"""Commands that start something: the HTTP API, the MCP server, the demo and the Dagster UI."""

from __future__ import annotations

import os
import shutil
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
    library("engram_pipeline.api", "serve")(host, port, state(ctx).settings)


def mcp(
    ctx: typer.Context,
    agent: Annotated[str, typer.Option("--agent", help="the agent the tools act as")],
    admin: Annotated[bool, typer.Option("--admin", help="let consolidate_corpus apply reviewed merge plans")] = False,
) -> None:
    """Run the MCP server (stdio) for one agent."""
    library("engram_pipeline.api", "run_mcp")(agent, state(ctx).settings, admin=admin)


def demo(
    ctx: typer.Context,
    import_only: Annotated[
        bool, typer.Option("--import-only", help="only import the sample corpus and print a recall per agent")
    ] = False,
    apply_merges: Annotated[bool, typer.Option("--apply-merges", help="also apply each agent's merge plan")] = False,
) -> None:
    """Run the whole pipeline through Dagster on the bundled sample corpus (four agents), then summarise.

    The Dagster side lives in the ``assets`` code location (``python -m assets.demo``), started as a child
    process so that the library never imports Dagster.
    """
    st = state(ctx)
    if import_only:
        from engram_pipeline.sample import run_demo

        run_demo(st.settings, st.settings.resolved_db_uri)
        return
    env = dict(os.environ)
    if st.db:
        env["ENGRAM_DB_URI"] = st.db
    args = [sys.executable, "-m", "assets.demo", *(["--apply-merges"] if apply_merges else [])]
    raise typer.Exit(subprocess.call(args, env=env))


def ui(
    ctx: typer.Context,
    workspace: Annotated[Path, typer.Option(help="Dagster workspace file")] = Path("workspace.yaml"),
) -> None:
    """Start the Dagster UI and daemon (`dagster dev`) on 127.0.0.1 with DAGSTER_HOME under ENGRAM_HOME."""
    st = state(ctx)
    if not workspace.is_file():
        raise CliError(f"{workspace} not found: run `engram ui` from the project root or pass --workspace")
    # The dagster command installed beside this interpreter (the venv's bin is not always on PATH).
    beside = Path(sys.executable).parent / "dagster"
    dagster = str(beside) if beside.exists() else shutil.which("dagster")
    if dagster is None:
        raise CliError("the dagster command is not installed in this environment")
    env = dict(os.environ)
    home = Path(env.get("DAGSTER_HOME") or Path(st.settings.home) / "dagster").resolve()
    home.mkdir(parents=True, exist_ok=True)
    instance = workspace.resolve().parent / "dagster.yaml"
    if instance.is_file() and not (home / "dagster.yaml").exists():
        shutil.copyfile(instance, home / "dagster.yaml")
    env["DAGSTER_HOME"] = str(home)
    if st.db:
        env["ENGRAM_DB_URI"] = st.db
    raise typer.Exit(subprocess.call([dagster, "dev", "-h", "127.0.0.1", "-w", str(workspace)], env=env))
