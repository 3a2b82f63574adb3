"""The README's commands, run as written from a temporary copy of the repository.

A new user copies commands from the README into a shell at the project root; each one must work there. The
copy gets the project's files and a ``.venv`` link to the interpreter running the tests, and the commands are
taken from README.md itself (so a command edited in the README is the command tested). The only change is the
embedder (``hashing``: no model to load, the same code paths); ``make demo`` runs through ``make`` when the
venv is up to date for it, else as the exact command the Makefile runs.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
SKIP = {
    ".git",
    ".venv",
    ".engram",
    ".dagster_home",
    ".hypothesis",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
}
AGENT = "coding-assistant"  # one of the sample corpus's agents


def inline_commands(pattern: str) -> list[str]:
    """Inline code spans of the README that match ``pattern`` (a regex for the whole span)."""
    found = [m.group(1) for m in re.finditer(r"`([^`\n]+)`", README) if re.fullmatch(pattern, m.group(1))]
    assert found, f"the README no longer shows a command matching {pattern!r}"
    return found


def code_block(after: str, lang: str) -> str:
    """The first fenced ``lang`` block after the heading ``after``."""
    tail = README[README.index(after) :]
    match = re.search(rf"```{lang}\n(.*?)```", tail, re.S)
    assert match, f"no {lang} block after {after!r}"
    return match.group(1)


def _copy(dst: Path) -> None:
    def ignore(_: str, names: list[str]) -> set[str]:
        return {n for n in names if n in SKIP or n.endswith(".egg-info")}

    shutil.copytree(REPO, dst, ignore=ignore, symlinks=True)
    (dst / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readme") / "engram-pipeline"
    _copy(root)
    return root


@pytest.fixture(scope="module")
def env(checkout: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "DAGSTER_HOME", "MEMORY_", "STM_"))}
    return {
        **base,
        "ENGRAM_EMBEDDER": "hashing",
        "DAGSTER_DISABLE_TELEMETRY": "1",
        # the copy's code, not an installed copy of the package
        "PYTHONPATH": str(checkout),
    }


def sh(command: str, checkout: Path, env: dict[str, str], *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def demo(checkout: Path, env: dict[str, str]) -> str:
    """``make demo`` in the copy (or the command it runs, when make would have to install the venv first)."""
    pyproject = checkout / "pyproject.toml"
    os.utime(pyproject, (0, 0))  # the copy is not newer than the venv's install stamp
    up_to_date = shutil.which("make") is not None and sh("make -q install", checkout, env).returncode == 0
    done = sh("make demo" if up_to_date else ".venv/bin/python -m assets.demo", checkout, env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_make_demo_runs_the_pipeline(demo: str, checkout: Path) -> None:
    assert "demo finished" in demo
    assert (checkout / ".engram" / "lancedb").is_dir() and (checkout / ".engram" / "dagster" / "dagster.yaml").is_file()
    assert "FAILED" not in demo
    # a dry run says what it would do, and an empty plan is not waiting for anyone
    plan_lines = [line for line in demo.splitlines() if line.strip().startswith("corpus_merge_plan")]
    assert plan_lines and all("would_merge=" in line and " merged=" not in line for line in plan_lines)
    assert " 0 clusters" not in demo


def test_backfill_commands_as_written(demo: str, checkout: Path, env: dict[str, str]) -> None:
    pattern = r"(?:DAGSTER_HOME=\S+ )?\.venv/bin/(?:python -m assets\.backfill|dagster job backfill) .*"
    commands = inline_commands(pattern)
    assert len(commands) >= 2
    for command in commands:
        done = sh(command, checkout, env)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        assert "must be an absolute path" not in done.stderr
    assert "submitted" in sh(commands[0], checkout, env).stdout


def test_backfill_without_partitions_says_why(tmp_path: Path, env: dict[str, str]) -> None:
    root = tmp_path / "fresh"
    _copy(root)
    done = sh(".venv/bin/python -m assets.backfill importance_decay", root, {**env, "PYTHONPATH": str(root)})
    assert done.returncode == 1
    assert "no agent partitions" in done.stderr and "Traceback" not in done.stderr


def test_cli_commands_against_the_demo_store(demo: str, checkout: Path, env: dict[str, str]) -> None:
    # The README's CLI section, with the store at its default place (./.engram/lancedb, no --db).
    for command in (
        ".venv/bin/engram agents",
        f'.venv/bin/engram recall --agent {AGENT} "lockfile error" -k 5',
        f".venv/bin/engram health --agent {AGENT}",
        f".venv/bin/engram --json export --agent {AGENT} -o {AGENT}.jsonl",
        f".venv/bin/engram --db ./.engram/lancedb import {AGENT}.jsonl",
        f".venv/bin/engram --json decay --agent {AGENT}",
        f".venv/bin/engram consolidate-corpus --agent {AGENT}",
    ):
        done = sh(command, checkout, env)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr


def test_store_snippet_runs_and_runs_again(demo: str, checkout: Path, env: dict[str, str]) -> None:
    """A reader runs it more than once: the second run finds the memory the first one made (it once hard-coded
    ``expected_version=1`` and failed there)."""
    snippet = code_block("### The store", "python")
    for run in ("first", "second"):
        done = sh(f".venv/bin/python - <<'EOF'\n{snippet}\nEOF", checkout, env)
        assert done.returncode == 0, f"{run} run: {done.stderr}"


def test_serve_and_the_client_snippet(demo: str, checkout: Path, env: dict[str, str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    serve = next(line for line in code_block("### HTTP API and MCP", "sh").splitlines() if "engram serve" in line)
    server = subprocess.Popen(
        ["sh", "-c", "exec env " + serve.replace("8080", port)],  # `exec` takes no VAR=value; `env` does
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        snippet = code_block("From Python, `engram_pipeline.client`", "python").replace("8080", port)
        for run in ("first", "second"):  # re-runnable, as the store's snippet
            done = sh(f".venv/bin/python - <<'EOF'\n{snippet}\nEOF", checkout, env, timeout=120)
            assert done.returncode == 0, f"{run} run: {done.stderr}"
            score, decayed = done.stdout.split()
            assert 0.0 <= float(score) <= 1.0 and int(decayed) >= 0
        snippet = code_block("The same verbs in the Engram SDK's shape", "python").replace("8080", port)
        for run in ("first", "second"):
            done = sh(f".venv/bin/python - <<'EOF'\n{snippet}\nEOF", checkout, env, timeout=120)
            assert done.returncode == 0, f"SDK-shaped snippet, {run} run: {done.stderr}"
    finally:
        server.terminate()
        server.wait(timeout=30)
