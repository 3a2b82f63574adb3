"""CLI fixtures: typer's CliRunner against a store in a temporary directory, with the hashing embedder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from engram_pipeline.cli import app

ENV = {"ENGRAM_EMBEDDER": "hashing"}


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def cli(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """``cli("get", id)`` runs ``engram --db <tmp> get id``; ``json_=True`` adds ``--json``."""
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    runner = CliRunner(env={**ENV, "ENGRAM_HOME": str(tmp_path / "home")})

    def run(*args: str, json_: bool = False) -> Result:
        return runner.invoke(app, ["--db", db, *(["--json"] if json_ else []), *args])

    return run


def parse(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path
