"""What the CLI prints on a terminal (a real pseudo-terminal) and what it prints into a pipe.

On a terminal: Rich tables that wrap long content instead of cutting it, and a progress bar on stderr for
pass commands. Into a pipe: plain lines with no escape codes and no progress bar, and ``--json`` is JSON only.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

LONG = (
    "The deployment checklist says to drain the queue workers, snapshot the database, rotate the "
    "credentials and only then flip the feature flag called zebrafinal"
)
ENTRY = "from engram_pipeline.cli import main; main()"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    return {
        **os.environ,
        "ENGRAM_EMBEDDER": "hashing",
        "ENGRAM_HOME": str(tmp_path / "home"),
        "PYTHONPATH": root,
        "COLUMNS": "100",
        "TERM": "xterm",
    }


def engram(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def on_terminal(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal; the exit code and everything it wrote."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=follower,
        stderr=follower, close_fds=True,
    )  # fmt: skip
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture
def db(tmp_path: Path, env: dict[str, str]) -> str:
    db = str(tmp_path / "store")
    for text in (LONG, "User prefers dark mode"):
        made = engram(["--db", db, "remember", "--agent", "alice", text], env, tmp_path)
        assert made.returncode == 0, made.stderr
    return db


@pytest.mark.integration
def test_on_a_terminal_tables_wrap_long_content_and_passes_show_progress(
    db: str, env: dict[str, str], tmp_path: Path
) -> None:
    code, out = on_terminal(["--db", db, "recall", "--agent", "alice", "deployment checklist"], env, tmp_path)
    assert code == 0, out
    assert "zebrafinal" in out and "…" not in out  # the whole content, wrapped, not cut at 60 characters
    assert all(len(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line)) <= 100 for line in out.splitlines())  # fits

    code, out = on_terminal(["--db", db, "decay", "--agent", "alice"], env, tmp_path)
    assert code == 0, out
    assert "decay" in out and "1/1" in out  # the progress bar over the agents, on stderr
    assert "processed" in out and "\x1b[" in out  # the report as a Rich table


@pytest.mark.integration
def test_into_a_pipe_output_is_plain_and_json_is_only_json(db: str, env: dict[str, str], tmp_path: Path) -> None:
    found = engram(["--db", db, "recall", "--agent", "alice", "deployment checklist"], env, tmp_path)
    assert found.returncode == 0, found.stderr
    assert "\x1b[" not in found.stdout + found.stderr and found.stderr == ""
    assert any(line.endswith(LONG) for line in found.stdout.splitlines())  # one row a line, nothing cut

    decayed = engram(["--db", db, "--json", "decay", "--agent", "alice"], env, tmp_path)
    assert decayed.returncode == 0 and decayed.stderr == ""  # no progress bar into a pipe
    (only,) = json.loads(decayed.stdout)
    assert only["agent_id"] == "alice" and only["report"]["processed"] == 2
