"""Run the Dagster webserver and daemon as real processes for integration tests and benchmarks.

Each process gets its own session (so stopping it also stops the code server it spawned), binds to 127.0.0.1
on a free port, and runs against a temporary ``DAGSTER_HOME`` holding a copy of the project's ``dagster.yaml``.
Their output goes to log files under that home; a failure to start quotes the log's tail.

>>> home = make_dagster_home(tmp_path / "dagster")                                    # doctest: +SKIP
>>> env = dagster_env(home, store_uri=str(tmp_path / "store"))                        # doctest: +SKIP
>>> with dagster_processes(env) as procs:                                             # doctest: +SKIP
...     procs.graphql("{ version }")
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_dagster_home(path: Path) -> Path:
    """A fresh ``DAGSTER_HOME`` at ``path`` with the project's ``dagster.yaml`` (if the repo has one)."""
    path.mkdir(parents=True, exist_ok=True)
    config = ROOT / "dagster.yaml"
    if config.exists():
        shutil.copy(config, path / "dagster.yaml")
    return path


def dagster_env(
    dagster_home: Path, *, store_uri: str, embedder: str = "hashing", extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment the Dagster processes (and their code servers) run with: the temp instance and store."""
    env = dict(os.environ)
    env.update(
        {
            "DAGSTER_HOME": str(dagster_home),
            "ENGRAM_HOME": str(Path(store_uri).parent),
            "ENGRAM_DB_URI": store_uri,
            "ENGRAM_EMBEDDER": embedder,
            "PYTHONUNBUFFERED": "1",
            # Keep the UI from phoning home during tests.
            "DAGSTER_DISABLE_TELEMETRY": "1",
        }
    )
    env.update(extra or {})
    return env


def workspace_args() -> list[str]:
    """How the processes find the code location: the repo's ``workspace.yaml`` if present, else the module."""
    workspace = ROOT / "workspace.yaml"
    return ["-w", str(workspace)] if workspace.exists() else ["-m", "assets.definitions"]


@dataclass
class DagsterProcs:
    """The running webserver (and daemon) and how to reach them."""

    env: dict[str, str]
    port: int
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def graphql(self, query: str, variables: dict[str, Any] | None = None, *, timeout: float = 60) -> dict[str, Any]:
        """POST a GraphQL query to the webserver; raise on transport or GraphQL errors."""
        response = httpx.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=timeout
        )
        response.raise_for_status()
        body = response.json()
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        return dict(body["data"])

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.logs / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def start(self, name: str, argv: list[str]) -> None:
        # the child keeps its own copy of the descriptor; ours is closed once it has started
        with (self.logs / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def wait_ready(self, timeout: float = 180) -> None:
        """Wait until the webserver answers and has loaded the code location."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                data = self.graphql(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus"
                    " locationOrLoadError { __typename ... on PythonError { message } } } } } }",
                    timeout=10,
                )
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    errors = [e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"]
                    if errors:
                        raise RuntimeError(f"code location failed to load: {errors}")
                    return
                last = str(entries)
            except (httpx.HTTPError, KeyError) as exc:
                last = repr(exc)
            time.sleep(1)
        raise TimeoutError(f"webserver not ready after {timeout}s ({last}):\n{self.log_tail('webserver')}")

    def stop(self) -> None:
        """Stop every process this object started (and its session: the code servers it spawned)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@contextmanager
def dagster_processes(
    env: dict[str, str],
    *,
    daemon: bool = True,
    webserver: bool = True,
    workspace: list[str] | None = None,
    timeout: float = 180,
) -> Iterator[DagsterProcs]:
    """Start ``dagster-webserver`` (and ``dagster-daemon``) on 127.0.0.1 and stop them on exit.

    ``workspace`` are the code-location arguments (default :func:`workspace_args`).
    """
    where = workspace or workspace_args()
    logs = Path(env["DAGSTER_HOME"]) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = DagsterProcs(env=env, port=free_port(), logs=logs)
    try:
        if webserver:
            procs.start(
                "webserver",
                [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(procs.port), *where],
            )
        if daemon:
            procs.start("daemon", [str(BIN / "dagster-daemon"), "run", *where])
        if webserver:
            procs.wait_ready(timeout)
        yield procs
    finally:
        procs.stop()


def wait_for(
    predicate: Any, *, timeout: float, interval: float = 1.0, what: str = "condition", procs: DagsterProcs | None = None
) -> Any:
    """Poll ``predicate()`` until it returns something truthy; fail with ``what`` (and the daemon's log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if procs is not None:
            procs.check_alive()
        time.sleep(interval)
    tail = f"\n--- daemon log ---\n{procs.log_tail('daemon')}" if procs is not None else ""
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}{tail}")
