"""The installed ``engram`` console script, as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _engram() -> str:
    path = Path(sys.executable).parent / "engram"
    if not path.exists():
        pytest.skip("the engram console script is not installed in this environment")
    return str(path)


@pytest.mark.integration
def test_console_script_round_trip(tmp_path: Path) -> None:
    env = {**os.environ, "ENGRAM_EMBEDDER": "hashing", "ENGRAM_HOME": str(tmp_path / "h")}
    db = str(tmp_path / "store")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_engram(), "--db", db, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    made = run("--json", "remember", "alice", "User's editor is Neovim")
    assert made.returncode == 0, made.stderr
    mid = json.loads(made.stdout)["memory"]["id"]
    assert json.loads(run("--json", "get", mid).stdout)["content"] == "User's editor is Neovim"

    stale = run("update", mid, "--expected-version", "9", "--importance", "0.2")
    assert stale.returncode == 1
    assert stale.stderr.startswith("error: ") and "version 1" in stale.stderr and "Traceback" not in stale.stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"agent_id": "a", "content": "ok"}\n{oops\n', encoding="utf-8")
    imported = run("import", str(bad))
    assert imported.returncode == 1 and "line 2" in imported.stderr and "Traceback" not in imported.stderr
