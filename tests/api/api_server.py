"""A real API server process for the tests that need one (``python -m engram_pipeline.api`` on a free port of
127.0.0.1, hashing embedder), started and stopped by the test that uses it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``python -m engram_pipeline.api`` on a free port over the store at ``uri``, with the bearer ``keys``
    (``ENGRAM_API_KEYS``); :meth:`start` returns once ``/healthz`` answers."""

    def __init__(self, uri: str, home: Path, keys: str = "writer:tok-w:w") -> None:
        self.uri, self.home, self.keys = uri, home, keys
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self) -> None:
        port = free_port()
        env = {
            **os.environ,
            "ENGRAM_EMBEDDER": "hashing",
            "ENGRAM_DB_URI": self.uri,
            "ENGRAM_HOME": str(self.home),
            "ENGRAM_API_KEYS": self.keys,
        }
        cmd = [sys.executable, "-m", "engram_pipeline.api", "--port", str(port)]
        self.proc = subprocess.Popen(cmd, env=env, cwd=self.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                assert self.proc.poll() is None, "the server exited while starting"
                time.sleep(0.1)
        raise AssertionError("the server did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None
