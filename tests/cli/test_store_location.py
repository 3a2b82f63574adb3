"""Where the store is: paths are absolute, a missing store is an error for every command that only reads it,
and ``engram init`` (or import / remember) creates it. Unknown agents are reported as unknown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram_pipeline.cli import app
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore, StoreNotFound
from tests.cli.conftest import ENV, parse

READ_ONLY = [
    ["agents"],
    ["get", "m1"],
    ["recall", "alice", "theme"],
    ["health", "--agent", "alice"],
    ["export"],
    ["decay", "--agent", "alice"],
]


@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: a[0])
def test_read_only_commands_refuse_a_missing_store(cli, db: str, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = cli(*args)
    assert result.exit_code == 1
    assert "no memory store at" in result.output and "engram init" in result.output
    assert "Traceback" not in result.output
    assert not Path(db).exists()  # nothing was created behind the user's back


def test_init_creates_the_store_and_reads_then_work(cli, db: str) -> None:  # type: ignore[no-untyped-def]
    info = parse(cli("init", json_=True))
    assert info["uri"] == db and info["embedder"].startswith("hashing")
    assert parse(cli("agents", json_=True)) == []
    assert cli("init").exit_code == 0  # an existing store is left as it is


def test_relative_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner(env={**ENV, "ENGRAM_HOME": "rel-home"})
    made = runner.invoke(app, ["--json", "init"])
    assert json.loads(made.stdout)["uri"] == str(tmp_path / "rel-home" / "lancedb")
    made = runner.invoke(app, ["--db", "sub/store", "--json", "init"])
    assert json.loads(made.stdout)["uri"] == str(tmp_path / "sub" / "store")
    assert Settings.from_env({"ENGRAM_HOME": "x"}).resolved_db_uri == str(tmp_path / "x" / "lancedb")


def test_unknown_agents_are_reported(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("remember", "alice", "User prefers dark mode").exit_code == 0
    for args in (
        ["health", "--agent", "bob"],
        ["recall", "bob", "theme"],
        ["decay", "--agent", "alice", "--agent", "bob"],
    ):
        result = cli(*args)
        assert result.exit_code == 1 and "unknown agent 'bob'" in result.output, args
    assert parse(cli("health", "--agent", "alice", json_=True))[0]["report"]["total"] == 1


def test_library_open_without_create(tmp_path: Path, settings: Settings) -> None:
    with pytest.raises(StoreNotFound, match="no memory store at"):
        MemoryStore.open(str(tmp_path / "missing"), settings=settings, create=False)
    assert not (tmp_path / "missing").exists()
    MemoryStore.open(str(tmp_path / "made"), settings=settings)
    assert MemoryStore.open(str(tmp_path / "made"), settings=settings, create=False).uri == str(tmp_path / "made")
