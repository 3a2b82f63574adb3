"""What every ``engram`` command shares: the global options, opening the store, output, and error handling.

Output goes to stdout: a readable table by default, JSON with the global ``--json``. Errors from bad input
(unknown ids, stale versions, malformed JSON, invalid settings) go to stderr as one ``error: ...`` line with
exit code 1 and no traceback; they are caught once, in :class:`EngramGroup`, not in every command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from engram_pipeline.settings import Settings, SettingsError

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

# Columns never shown: the vector is noise on a terminal, the others are store internals.
HIDDEN = ("vector", "write_token", "content_hash")


class CliError(Exception):
    """A usage problem the command found itself (e.g. neither ``--agent`` nor ``--all-agents``)."""


def _user_errors() -> tuple[type[BaseException], ...]:
    from engram_pipeline.embed import EmbedderError
    from engram_pipeline.store import StoreError

    # ValueError covers SettingsError, InvalidInput and json.JSONDecodeError; OSError a path we cannot use.
    return (CliError, StoreError, SettingsError, EmbedderError, ValueError, OSError)


class EngramGroup(TyperGroup):
    """The root command group: turns errors from bad input into ``error: ...`` on stderr and exit code 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _user_errors() as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None


@dataclass
class State:
    """Global options, and the settings and store opened from them on first use."""

    db: str | None = None
    json: bool = False
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

    def known_agents(self, agents: Sequence[str]) -> list[str]:
        """``agents`` (deduplicated), refusing any that has no memories in the store."""
        from engram_pipeline.store import UnknownAgent

        wanted = list(dict.fromkeys(agents))
        for agent_id in wanted:
            if not self.store.has_agent(agent_id):
                raise UnknownAgent(agent_id)
        return wanted


def state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    assert isinstance(obj, State)
    return obj


def library(module: str, name: str) -> Callable[..., Any]:
    """A library function imported on first use, so that ``engram --help`` stays fast and a pass that is
    not installed fails only the command that needs it, with a clear message."""
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
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


def cell(value: Any, width: int = 60) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, list | tuple | dict | set | frozenset):
        text = json.dumps(jsonable(value), ensure_ascii=False)
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, width: int = 60) -> None:
    """A plain aligned table (no colours: it must read the same in a log file)."""
    cells = [[cell(r.get(c), width) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    typer.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def print_record(record: dict[str, Any], *, width: int = 100) -> None:
    """One record as ``key  value`` lines."""
    shown = {k: v for k, v in record.items() if k not in HIDDEN}
    pad = max((len(k) for k in shown), default=0)
    for k, v in shown.items():
        typer.echo(f"{k.ljust(pad)}  {cell(v, width)}")


def warn(message: str) -> None:
    typer.echo(message, err=True)


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
