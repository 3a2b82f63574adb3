"""``engram ui``: a real ``dagster dev`` on a free port, stopped with SIGTERM; nothing it started outlives it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies waiting to be reaped do not count)."""
    out = subprocess.run(["ps", "-e", "-o", "pgid=,stat="], capture_output=True, text=True).stdout
    return any(int(g) == pgid and not stat.startswith("Z") for g, stat in (line.split() for line in out.splitlines()))


@pytest.mark.integration
@pytest.mark.slow
def test_ui_serves_on_the_given_port_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ENGRAM_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dagster"),
        "ENGRAM_EMBEDDER": "hashing",
    }
    entry = "from engram_pipeline.cli import main; main()"
    log = tmp_path / "ui.log"  # a file, not a pipe: dagster dev logs more than a pipe buffer holds
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-c", entry, "ui", "--port", str(port)], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
    group = None
    try:
        deadline = time.monotonic() + 300  # a safety limit for a loaded machine, not a measurement
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(2)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        (group,) = _children(proc.pid)  # dagster dev, the leader of its own process group
        assert os.getpgid(group) == group
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        print(f"engram ui stopped {time.monotonic() - started:.1f} s after SIGTERM")
        assert not _group_alive(group)  # the webserver, the daemon and the code server are gone too
        assert (tmp_path / "dagster" / "dagster.yaml").is_file()  # the instance set up in one place
    finally:
        if proc.poll() is None:
            proc.kill()
        if group is not None and _group_alive(group):
            os.killpg(group, signal.SIGKILL)
