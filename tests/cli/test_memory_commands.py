"""The store verbs through the CLI: success paths, --json output, and bad input (exit 1, one stderr line,
no traceback, nothing written)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperGroup, TyperOption

from engram_pipeline.cli import app
from engram_pipeline.model import NEW_MEMORY_DEFAULTS, MemoryChanges, NewMemory, PlacedMemory, record_fields
from tests.cli.conftest import parse, write_jsonl


def _no_traceback(result) -> None:  # type: ignore[no-untyped-def]
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_remember_get_recall_update_delete_restore(cli) -> None:  # type: ignore[no-untyped-def]
    made = parse(cli("remember", "alice", "User lives in Berlin", "--tag", "profile", json_=True))
    assert made["outcome"] == "created"
    mid = made["memory"]["id"]
    assert "vector" not in made["memory"]

    human = cli("get", mid)
    assert human.exit_code == 0 and "User lives in Berlin" in human.stdout

    row = parse(cli("get", mid, json_=True))
    assert row["version"] == 1 and row["tags"] == ["profile"] and row["access_count"] == 0

    hits = parse(cli("recall", "alice", "where does the user live", "-k", "3", json_=True))
    assert [h["memory"]["id"] for h in hits] == [mid]
    assert cli("recall", "alice", "where does the user live").exit_code == 0

    updated = parse(cli("update", mid, "--expected-version", "1", "--importance", "0.8", json_=True))
    assert updated["version"] == 2 and updated["importance"] == 0.8
    ended = parse(cli("update", mid, "--expected-version", "2", "--outcome", "success", json_=True))
    assert ended["outcome"] == "success"
    both = cli("update", mid, "--expected-version", "3", "--outcome", "failure", "--clear-outcome")
    assert both.exit_code == 1 and "not both" in both.stderr
    cleared = parse(cli("update", mid, "--expected-version", "3", "--clear-outcome", json_=True))
    assert cleared["version"] == 4 and cleared["outcome"] is None

    assert cli("delete", mid).exit_code == 0
    gone = cli("get", mid)
    assert gone.exit_code == 1 and "does not exist" in gone.stderr

    back = parse(cli("restore", mid, json_=True))
    assert back["id"] == mid and back["content"] == "User lives in Berlin"

    again = parse(cli("remember", "alice", "user lives in  berlin", json_=True))
    assert again["outcome"] == "exact_duplicate" and again["memory"]["id"] == mid


def test_stale_expected_version_is_refused_with_the_current_version(cli) -> None:  # type: ignore[no-untyped-def]
    mid = parse(cli("remember", "alice", "User prefers tea", json_=True))["memory"]["id"]
    assert cli("update", mid, "--expected-version", "1", "--content", "User prefers green tea").exit_code == 0
    stale = cli("update", mid, "--expected-version", "1", "--importance", "0.1")
    assert stale.exit_code == 1
    assert "version 2" in stale.stderr and stale.stdout == ""
    _no_traceback(stale)
    assert parse(cli("get", mid, json_=True))["content"] == "User prefers green tea"


def test_bad_input_exits_non_zero_without_traceback(cli) -> None:  # type: ignore[no-untyped-def]
    for args in (
        ("get", "no-such-id"),
        ("restore", "no-such-id"),
        ("delete", "no-such-id"),
        ("remember", "alice", "x", "--metadata", "{not json"),
        ("remember", "alice", "x", "--metadata", "[1, 2]"),
        ("remember", "alice", "   "),
        ("update", "no-such-id", "--expected-version", "1", "--importance", "0.3"),
        ("decay",),  # neither --agent nor --all-agents
    ):
        result = cli(*args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith("error: "), (args, result.stderr)
        _no_traceback(result)
    # A value outside a choice is refused by the parser, before anything runs: a usage error (2) listing them.
    for args in (
        ("remember", "--agent", "alice", "x", "--kind", "opinion"),
        ("recall", "--agent", "alice", "q", "--tier", "lukewarm"),
    ):
        result = cli(*args)
        assert result.exit_code == 2 and "is not one of" in result.output, (args, result.output)
        _no_traceback(result)
    assert parse(cli("agents", json_=True)) == []  # nothing was written


def test_restore_of_a_row_edited_after_it_was_hidden_needs_expected_version(cli, db) -> None:  # type: ignore[no-untyped-def]
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore
    from engram_pipeline.store.marks import mark_superseded

    store = MemoryStore.open(db, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    old = store.remember("alice", "User lives in Berlin").memory
    new = store.remember("alice", "Completely different memory about tea").memory
    mark_superseded(store.engine, old, by=new["id"], reason="t", actor="t")
    store.update(old["id"], expected_version=2, tags=["edited"])
    refused = cli("restore", old["id"])
    assert refused.exit_code == 1 and "changed after the supersede" in refused.stderr and "(3)" in refused.stderr
    _no_traceback(refused)
    back = parse(cli("restore", old["id"], "--expected-version", "3", json_=True))
    assert back["status"] == "active" and back["version"] == 4


def test_invalid_settings_are_reported_by_name(cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MEMORY_CONTRADICTION_POLICY", "shrug")
    result = cli("agents")
    assert result.exit_code == 1 and "MEMORY_CONTRADICTION_POLICY" in result.stderr
    _no_traceback(result)


def test_agents_lists_counts_by_status(cli) -> None:  # type: ignore[no-untyped-def]
    cli("remember", "a", "one fact")
    cli("remember", "a", "another fact about ships")
    cli("remember", "b", "something else")
    rows = {r["agent_id"]: r for r in parse(cli("agents", json_=True))}
    assert rows["a"]["memories"] == 2 and rows["a"]["active"] == 2 and rows["b"]["memories"] == 1
    assert "agent_id" in cli("agents").stdout


def test_nothing_lands_in_the_working_directory(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cli("remember", "a", "one fact")
    assert not (Path.cwd() / ".engram").exists()
    path = write_jsonl(tmp_path / "x.jsonl", [{"agent_id": "a", "content": "two"}])
    assert cli("import", str(path)).exit_code == 0


def _options(command: str) -> dict[str, TyperOption]:
    """A command's options by the record field each sets (``--tag`` sets ``tags``)."""
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    params = group.commands[command].params
    return {"tags" if p.name == "tag" else str(p.name): p for p in params if isinstance(p, TyperOption)}


def test_remember_and_update_take_the_records_fields() -> None:
    """``engram remember`` has an option per field of ``model.NewMemory`` (and ``--id``), with its default, and
    ``engram update`` one per field of ``model.MemoryChanges``; each option's help is the record's note."""
    new = record_fields(PlacedMemory)
    remember = _options("remember")
    assert set(remember) - {"agent"} == set(NewMemory.__annotations__) | {"memory_id"}
    for name, default in NEW_MEMORY_DEFAULTS.items():
        assert remember[name].default == (None if name == "tags" else default), name  # --tag: none given
    changes = record_fields(MemoryChanges)
    update = _options("update")
    assert set(update) - {"expected_version", "clear_outcome"} == set(changes)
    for options, notes in ((remember, new), (update, changes)):
        for name, option in options.items():
            if name in notes and not (options is update and name == "outcome"):
                assert option.help and option.help.startswith(str(notes[name][1])), name
    assert update["outcome"].help == new["outcome"][1]  # the CLI sends no null: --clear-outcome clears one
