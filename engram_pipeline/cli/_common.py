"""What every ``engram`` command shares: the global options, opening the store, output, and error handling.

Output goes to stdout: a readable table by default, JSON with the global ``--json``. Errors from bad input
(unknown ids, stale versions, malformed JSON, invalid settings) go to stderr as one ``error: ...`` line with
exit code 1 and no traceback; they are caught once, in :class:`EngramGroup`, not in every command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from typer.core import TyperCommand, TyperGroup

from engram_pipeline import model
from engram_pipeline.extras import extra_of, missing
from engram_pipeline.model import CONFIDENCE_TIERS
from engram_pipeline.settings import Settings, SettingsError

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

# Columns never shown: the vector is noise on a terminal, the others are store internals.
HIDDEN = ("vector", "write_token", "content_hash")
# Columns of free text: in a terminal table they take the width left and wrap at words.
WRAPPED = ("content", "reason", "result")
# Narrower headers for numeric columns on a terminal, where the content needs the width.
SHORT_HEADERS = {"similarity": "sim", "importance": "imp", "confidence": "conf", "version": "ver"}


# -- the options every command spells the same way ------------------------------------------------------
# An agent is always named with --agent: repeatable on pass commands (or --all-agents), once on the commands
# that act for one agent (remember, recall; their older positional form `recall AGENT QUERY` still works).
AgentsOpt = Annotated[list[str] | None, typer.Option("--agent", metavar="AGENT", help="an agent id (repeatable)")]
AllOpt = Annotated[bool, typer.Option("--all-agents", help="every agent in the store")]
AgentOpt = Annotated[str | None, typer.Option("--agent", metavar="AGENT", help="the agent (required)")]

# Choices, as Literals so that --help lists them: the model's own (engram_pipeline.model), and the tiers a write
# may ask for, written out because typer reads one flat Literal (tests/cli/test_conventions.py holds it equal to
# the model's tiers and "auto").
Kind = model.Kind
Source = model.Source
Outcome = model.Outcome
StoreTier = model.Tier
WriteTier = Literal["stm", "ltm", "auto"]
# A list option cannot be a Literal in typer: the confidence tiers are an enum built from the model's table.
ConfidenceTier = enum.StrEnum("ConfidenceTier", {t: t for t in CONFIDENCE_TIERS})  # type: ignore[misc]
Scope = Literal["recent", "full"]
OnError = Literal["abort", "skip"]
Checks = Literal["remember", "exact"]  # import_jsonl(checks=...)


def agent_and(agent: str | None, first: str, second: str | None, what: str) -> tuple[str, str]:
    """The agent and the one positional ``what``: ``--agent A TEXT``, or the older positional ``A TEXT``
    (``second`` is a hidden argument that only the older form fills)."""
    if second is None:
        if agent is None:
            raise CliError(f"give --agent AGENT with the {what}")
        return agent, first
    if agent is not None:
        raise CliError(f"give --agent AGENT and one {what}, not an agent twice")
    return first, second


# The hidden second positional of the older `remember AGENT CONTENT` / `recall AGENT QUERY` form.
LegacyArg = Annotated[str | None, typer.Argument(hidden=True, show_default=False, metavar="")]


class CliError(Exception):
    """A usage problem the command found itself (e.g. neither ``--agent`` nor ``--all-agents``)."""


def _user_errors() -> tuple[type[BaseException], ...]:
    from engram_pipeline.embed import EmbedderError
    from engram_pipeline.extras import MissingExtra
    from engram_pipeline.store import StoreError

    # ValueError covers SettingsError, InvalidInput and json.JSONDecodeError; OSError a path we cannot use.
    return (CliError, StoreError, SettingsError, EmbedderError, MissingExtra, ValueError, OSError)


class EngramGroup(TyperGroup):
    """The root command group: turns errors from bad input into ``error: ...`` on stderr and exit code 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _user_errors() as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None


class EngramCommand(TyperCommand):
    """A command whose usage line leaves out hidden arguments (the older positional agent form)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if not getattr(param, "hidden", False):
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


@dataclass
class State:
    """Global options, and the settings and store opened from them on first use."""

    db: str | None = None
    json: bool = False
    command: str = ""  # the subcommand run (the label of its progress bar)
    _settings: Settings | None = field(default=None, repr=False)
    _store: MemoryStore | None = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            settings = Settings.from_env()
            self._settings = settings.replace(db_uri=self.db) if self.db else settings
        return self._settings

    @property
    def store(self) -> MemoryStore:
        """The existing store (a missing one is an error that says how to create it)."""
        return self.open_store(create=False)

    def open_store(self, *, create: bool) -> MemoryStore:
        """The store, created first when ``create`` (``init``, ``import``, ``remember``)."""
        if self._store is None:
            from engram_pipeline.store import MemoryStore

            self._store = MemoryStore.open(self.settings.resolved_db_uri, settings=self.settings, create=create)
        return self._store

    def store_exists(self) -> bool:
        """Whether the store is there already (then it is open: :attr:`store` returns it)."""
        from engram_pipeline.store import StoreNotFound

        try:
            self.open_store(create=False)
        except StoreNotFound:
            return False
        return True

    def known_agents(self, agents: Sequence[str]) -> list[str]:
        """``agents`` (deduplicated), refusing any that has no memories in the store."""
        from engram_pipeline.store import UnknownAgent

        wanted = list(dict.fromkeys(agents))
        for agent_id in wanted:
            if not self.store.engine.has_agent(agent_id):
                raise UnknownAgent(agent_id)
        return wanted


def state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    assert isinstance(obj, State)
    return obj


def library(module: str, name: str, *, what: str) -> Callable[..., Any]:
    """A library function imported on first use, so that ``engram --help`` stays fast and a part that is
    not installed fails only the command that needs it (``what``), with a message naming its extra."""
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        if extra_of(exc.name):
            raise missing(exc, what) from None
        raise CliError(f"{module}.{name} is not available in this installation ({exc})") from None
    except AttributeError as exc:
        raise CliError(f"{module}.{name} is not available in this installation ({exc})") from None
    return fn


# -- output ----------------------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """Reports, rows and hits as plain JSON values (times as ISO-8601, metadata text as an object)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in HIDDEN:
                continue
            if k in ("metadata", "importance_factors") and isinstance(v, str) and v:
                with contextlib.suppress(json.JSONDecodeError):
                    v = json.loads(v)
            out[str(k)] = jsonable(v)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def emit_json(value: Any) -> None:
    typer.echo(json.dumps(jsonable(value), ensure_ascii=False))


def cell(value: Any) -> str:
    """A value as table text, whole: floats to 4 significant digits, times to the second, collections as JSON."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, list | tuple | dict | set | frozenset):
        return json.dumps(jsonable(value), ensure_ascii=False)
    return str(value)


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Rows as a table, nothing cut: on a terminal a Rich table that wraps long cells to the width of the
    terminal; otherwise (a pipe, a log file) plain aligned columns without colour, one row a line."""
    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    if stdout_is_tty():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1), collapse_padding=True)
        for c in columns:
            # Free text gets the room left and wraps at words; other cells fold if they must.
            wrapped = c in WRAPPED
            table.add_column(SHORT_HEADERS.get(c, c), overflow="fold", ratio=1 if wrapped else None)
        for row in cells:
            table.add_row(*(Text(v) for v in row))  # Text: brackets in a memory are not Rich markup
        Console().print(table)
        return
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    typer.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def print_record(record: dict[str, Any]) -> None:
    """One record as ``key  value`` lines (a two-column Rich table on a terminal), values whole."""
    shown = {k: v for k, v in record.items() if k not in HIDDEN}
    if stdout_is_tty():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for k, v in shown.items():
            table.add_row(Text(k), Text(cell(v)))
        Console().print(table)
        return
    pad = max((len(k) for k in shown), default=0)
    for k, v in shown.items():
        typer.echo(f"{k.ljust(pad)}  {cell(v)}")


@contextlib.contextmanager
def progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` for a Rich progress bar on stderr when stderr is a terminal; a no-op otherwise, so that
    pipes and log files get clean output (and ``--json`` on stdout is never mixed with it)."""
    if not stderr_is_tty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def tracked(label: str, items: Sequence[str]) -> Iterator[str]:
    """``items`` one by one, with a progress bar (``label: item``) on a terminal's stderr."""
    with progress(label, len(items)) as advance:
        for item in items:
            yield item
            advance(1)


def warn(message: str) -> None:
    typer.echo(message, err=True)


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
