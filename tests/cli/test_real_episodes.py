"""Issue scenario: episodes as agents write them, through `engram import` and `engram consolidate`."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tests.cli.conftest import parse, write_jsonl


def test_reported_speech_and_logged_fixes_become_one_belief_and_one_procedure(cli, tmp_path: Path) -> None:
    lines = [
        {
            "agent_id": "kim",
            "content": f"Session {n}: Kim said she prefers dark mode in every editor",
            "kind": "episodic",
        }
        for n in range(1, 6)
    ] + [
        {
            "agent_id": "kim",
            "content": f"When the build fails on lint errors, run ruff --fix and retry ({n})",
            "kind": "episodic",
            "outcome": "success",
        }
        for n in range(1, 4)
    ]
    assert cli("import", str(write_jsonl(tmp_path / "kim.jsonl", lines))).exit_code == 0
    first = parse(cli("consolidate", "--agent", "kim", "--scope", "full", json_=True))[0]["report"]
    assert (first["beliefs_created"], first["procedures_created"]) == (1, 1), first
    out = cli("export")
    assert out.exit_code == 0, out.output
    by_kind = {r["kind"]: r for r in map(json.loads, out.stdout.splitlines()) if r["source"] == "derived"}
    assert by_kind["semantic"]["content"] == "Kim prefers dark mode in every editor."
    assert by_kind["semantic"]["confidence"] == round(1 - math.exp(-5 / 3), 6)  # five consistent repetitions
    assert by_kind["procedural"]["content"] == "When the build fails on lint errors, run ruff --fix and retry."
    second = parse(cli("consolidate", "--agent", "kim", "--scope", "full", json_=True))[0]["report"]
    counts = ("beliefs_created", "beliefs_reinforced", "procedures_created", "procedures_reinforced", "schemas_created")
    assert [second[c] for c in counts] == [0] * len(counts), second
