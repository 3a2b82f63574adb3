"""``make ui [PORT=3000]`` and ``engram ui [--port N]``: ``dagster dev`` (UI and daemon) on 127.0.0.1 with the
project's instance and store, and stopped promptly.

``dagster dev`` shuts its webserver, daemon and code-server processes down one after the other and waited about
90 s on SIGINT/SIGTERM here. It runs in a process group of its own: the first SIGINT or SIGTERM this command
gets is sent to the whole group, and whatever is left of the group after ``GRACE_S`` seconds is killed.
The instance and the store come from :func:`assets.instance.prepare_environment`, the one place that sets up
``DAGSTER_HOME``.

    python -m assets.ui --port 3001
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from assets.instance import PROJECT_ROOT, prepare_environment

DEFAULT_PORT = 3000
# Seconds the group gets to exit after the signal before it is killed.
GRACE_S = 10.0


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stop(signum)


def dagster_command() -> str:
    """The dagster command installed beside this interpreter (the venv's bin is not always on PATH)."""
    beside = Path(sys.executable).parent / "dagster"
    found = str(beside) if beside.exists() else shutil.which("dagster")
    if found is None:
        raise SystemExit(
            "error: the dagster command is not installed in this environment: pip install 'engram-pipeline[dagster]'"
        )
    return found


def stop_group(proc: subprocess.Popen[bytes], signum: int, *, grace_s: float = GRACE_S) -> int:
    """Send ``signum`` to ``proc``'s process group, wait ``grace_s``, then kill what is left of the group."""
    try:
        os.killpg(proc.pid, signum)
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return proc.wait()
    finally:
        # Children that outlive their parent (a code server, the daemon) are in the same group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assets.ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--workspace", type=Path, default=PROJECT_ROOT / "workspace.yaml")
    args = parser.parse_args(argv)
    if not args.workspace.is_file():
        print(f"error: {args.workspace} not found: pass --workspace", file=sys.stderr)
        return 1
    env = dict(os.environ)
    prepare_environment(env)
    env.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    command = [dagster_command(), "dev", "-h", args.host, "-p", str(args.port), "-w", str(args.workspace)]
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_stop)
    proc = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return proc.wait()
    except _Stop as stop:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C does not interrupt the clean-up
        print(f"\nstopping dagster dev (process group {proc.pid})", file=sys.stderr)
        stop_group(proc, stop.signum)
        return 128 + stop.signum


if __name__ == "__main__":
    sys.exit(main())
