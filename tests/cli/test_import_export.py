"""``engram import`` / ``engram export``: line-numbered errors, all-or-nothing batches, the round trip."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import parse, write_jsonl

GOOD = [
    {"agent_id": "alice", "content": "User lives in Berlin", "tags": ["profile"], "source": "user"},
    {"agent_id": "alice", "content": "When the build fails with a lockfile error, run npm ci",
     "kind": "episodic", "outcome": "success", "created_at": "2026-01-05T10:00:00Z", "access_count": 3},
    {"agent_id": "bob", "content": "Meeting at 3pm today", "tier": "stm", "pinned": True, "id": "bob-1"},
]  # fmt: skip


def test_import_then_export_round_trips(cli, tmp_path: Path, db: str) -> None:  # type: ignore[no-untyped-def]
    src = write_jsonl(tmp_path / "in.jsonl", GOOD)
    report = parse(cli("import", str(src), json_=True))
    assert report["created"] == 3 and report["errors"] == [] and report["batches"] == 1

    out = tmp_path / "out.jsonl"
    assert cli("export", "--output", str(out)).exit_code == 0
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert {e["content"] for e in exported} == {g["content"] for g in GOOD}
    assert all(e["version"] == 1 and e["status"] == "active" for e in exported)
    bob = next(e for e in exported if e["id"] == "bob-1")
    assert bob["tier"] == "stm" and bob["pinned"] is True

    # Into a fresh store: every field comes back as it was exported.
    other = str(tmp_path / "other")
    from typer.testing import CliRunner

    from engram_pipeline.cli import app

    runner = CliRunner(env={"ENGRAM_EMBEDDER": "hashing"})
    assert runner.invoke(app, ["--db", other, "import", str(out)]).exit_code == 0
    again = runner.invoke(app, ["--db", other, "export"])
    assert [json.loads(line) for line in again.stdout.splitlines()] == exported

    # Into the same store: all exact duplicates, nothing new.
    report = parse(cli("import", str(out), json_=True))
    assert report["created"] == 0 and report["exact_duplicates"] == 3


def test_malformed_line_is_reported_with_its_number_and_nothing_is_written(cli, tmp_path: Path, db: str) -> None:  # type: ignore[no-untyped-def]
    lines = [json.dumps(GOOD[0]), json.dumps(GOOD[1]), '{"agent_id": "alice", "content": ', json.dumps(GOOD[2])]
    result = cli("import", str(write_jsonl(tmp_path / "bad.jsonl", lines)))
    assert result.exit_code == 1
    assert "line 3" in result.stderr and "not valid JSON" in result.stderr
    assert "Traceback" not in result.output
    assert not Path(db).exists()  # not even the store the import made for it


def test_a_failed_import_into_a_new_store_leaves_nothing_behind(cli, tmp_path: Path, db: str) -> None:  # type: ignore[no-untyped-def]
    bad = write_jsonl(tmp_path / "bad.jsonl", [GOOD[0], {"agent_id": "alice"}])  # line 2 has no content
    result = cli("import", str(bad))
    assert result.exit_code == 1 and "line 2" in result.stderr
    assert not Path(db).exists(), sorted(p.name for p in Path(db).iterdir())  # it once kept 7 empty tables
    assert "no memory store at" in cli("agents").stderr
    assert cli("import", str(bad), "--dry-run").exit_code == 1 and not Path(db).exists()

    # An existing store is never removed, even an empty one
    assert cli("init").exit_code == 0
    assert cli("import", str(bad)).exit_code == 1
    assert parse(cli("agents", json_=True)) == []


def test_a_failed_batch_writes_nothing_and_earlier_batches_stay(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = [{"agent_id": "a", "content": f"fact number {i}"} for i in range(5)]
    lines[3] = {"agent_id": "a", "content": "fact three", "confidence": 7}  # batch 2 (lines 3-4) is bad
    src = write_jsonl(tmp_path / "b.jsonl", lines)
    result = cli("import", str(src), "--batch-size", "2", json_=True)
    assert result.exit_code == 1 and "line 4: confidence must be within [0, 1]" in result.stderr
    report = json.loads(result.stdout)
    assert report["created"] == 2 and report["batches"] == 1 and report["failed_batches"] == 1
    contents = {r["content"] for r in (json.loads(x) for x in cli("export").stdout.splitlines())}
    assert contents == {"fact number 0", "fact number 1"}

    # --on-error skip: only the bad line is skipped; the good line of its batch ("fact number 2") goes in.
    result = cli("import", str(src), "--batch-size", "2", "--on-error", "skip", json_=True)
    # what was asked for happened: exit 0, and the skipped line is a note, not an error
    assert result.exit_code == 0 and "1 bad line(s) skipped" in result.stderr and "error:" not in result.stderr
    report = json.loads(result.stdout)
    assert (report["created"], report["exact_duplicates"], report["failed_batches"]) == (2, 2, 1)
    contents = {r["content"] for r in (json.loads(x) for x in cli("export").stdout.splitlines())}
    assert contents == {"fact number 0", "fact number 1", "fact number 2", "fact number 4"}


def test_skip_writes_the_good_lines_of_a_1000_line_batch_around_one_bad_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines: list[object] = [{"agent_id": "a", "content": f"fact number {i}"} for i in range(1000)]
    lines[500] = {"agent_id": "a"}  # no content
    result = cli("import", str(write_jsonl(tmp_path / "k.jsonl", lines)), "--on-error", "skip", json_=True)
    assert result.exit_code == 0 and "line 501" in result.stderr
    report = json.loads(result.stdout)
    assert (report["lines"], report["created"], report["batches"], len(report["errors"])) == (1000, 999, 1, 1)


def test_dry_run_validates_and_writes_nothing(cli, tmp_path: Path, db: str) -> None:  # type: ignore[no-untyped-def]
    report = parse(cli("import", str(write_jsonl(tmp_path / "d.jsonl", GOOD)), "--dry-run", json_=True))
    assert report["created"] == 3 and report["dry_run"] is True
    assert not Path(db).exists()
    assert cli("init").exit_code == 0
    assert parse(cli("import", str(write_jsonl(tmp_path / "d.jsonl", GOOD)), "--dry-run", json_=True))["created"] == 3
    assert parse(cli("agents", json_=True)) == []


def test_missing_file_is_a_usage_error(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli("import", str(tmp_path / "nope.jsonl"))
    assert result.exit_code == 2 and "Traceback" not in result.output
