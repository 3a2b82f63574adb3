"""The ``engram`` command: a thin shell over the library (store verbs, import/export, lifecycle passes,
servers). Global options: ``--db URI`` (default: ``ENGRAM_DB_URI``, else ``<ENGRAM_HOME>/lancedb``) and
``--json`` for machine-readable output. Settings come from the environment (see ``engram_pipeline.settings``).

    engram --db ./.engram/lancedb import memories.jsonl
    engram recall --agent coding-assistant "lockfile error" -k 5
    engram --json decay --all-agents
"""

from __future__ import annotations

from typing import Annotated

import typer

from engram_pipeline.cli import memories, passes, services
from engram_pipeline.cli._common import EngramCommand, EngramGroup, State
from engram_pipeline.pass_names import PASS_NAMES

app = typer.Typer(
    cls=EngramGroup,
    name="engram",
    help="Engram pipeline: lifecycle engine for AI-agent memory.",
    no_args_is_help=True,
    add_completion=False,
    # Never print local variables in a traceback: they can hold API keys from the settings.
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"engram {version('engram-pipeline')}")
        except PackageNotFoundError:  # a source checkout that was never installed
            typer.echo("engram (not installed: no version)")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[str | None, typer.Option("--db", metavar="URI", help="LanceDB URI of the store")] = None,
    json_: Annotated[bool, typer.Option("--json", help="machine-readable JSON on stdout")] = False,
    _show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    ctx.obj = State(db=db, json=json_, command=ctx.invoked_subcommand or "")


# The commands of the lifecycle passes are named by the passes' table (engram_pipeline.pass_names).
for name, fn in (
    ("init", memories.init),
    ("import", memories.import_),
    ("export", memories.export),
    ("remember", memories.remember),
    ("get", memories.get),
    ("update", memories.update),
    ("recall", memories.recall),
    ("restore", memories.restore),
    ("delete", memories.delete),
    ("agents", memories.agents),
    (PASS_NAMES["ltm_decay"].command, passes.decay),
    (PASS_NAMES["confidence_decay"].command, passes.decay_confidence),
    (PASS_NAMES["stm_promotion"].command, passes.promote),
    (PASS_NAMES["contradictions"].command, passes.contradictions),
    ("neighbour-graph", passes.neighbour_graph),
    (PASS_NAMES["corpus_merge"].command, passes.consolidate_corpus),
    ("discard-plan", passes.discard_plan),
    (PASS_NAMES["consolidation"].command, passes.consolidate),
    (PASS_NAMES["health"].command, passes.health),
    ("maintain", passes.maintain),
    ("migrate", passes.migrate),
    ("serve", services.serve),
    ("mcp", services.mcp),
    ("demo", services.demo),
    ("ui", services.ui),
):
    app.command(name, cls=EngramCommand)(fn)


def main() -> None:
    """Console-script entry point (``engram``)."""
    app()


__all__ = ["app", "main"]
