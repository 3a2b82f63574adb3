"""Where ``engram serve``'s and ``engram mcp``'s wall time to their first answer goes (issue 36, item 1).

``bench/bench_startup.py`` gives wall and CPU seconds; on a shared 2-core machine the gap between them could be
the queue for a core, or time the process spends asleep (a poll interval, a lock, the GIL held by the model's
warm-up thread, disk). This splits it, for the main thread that answers, from ``/proc/PID/schedstat``: time
on a core, time runnable but waiting for one (``run_delay``), and the rest of the wall time, asleep or blocked.

    python bench/profile_first_answer.py             # default embedder (MiniLM), 3 fresh processes each, medians
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENGRAM = str(Path(sys.executable).parent / "engram")
AGENT = "bench"


def main_thread(pid: int) -> tuple[float, float]:
    """Seconds the process's main thread has been on a core and runnable waiting for one."""
    on_cpu, waiting, _ = (int(x) for x in Path(f"/proc/{pid}/schedstat").read_text().split())
    return on_cpu / 1e9, waiting / 1e9


def healthz(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(env: dict[str, str]) -> tuple[float, float, float]:
    port = free_port()
    start = time.perf_counter()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc = subprocess.Popen([ENGRAM, "serve", "--port", str(port)], env=env, **quiet)
    try:
        while not healthz(port):
            if proc.poll() is not None:
                raise SystemExit(f"engram serve exited with {proc.returncode}")
            time.sleep(0.01)
        return time.perf_counter() - start, *main_thread(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def mcp(env: dict[str, str]) -> tuple[float, float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [ENGRAM, "mcp", "--agent", AGENT],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    info = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": info}) + "\n").encode())
    proc.stdin.flush()
    try:
        while True:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"engram mcp: no answer (exit {proc.poll()})")
            if json.loads(line).get("id") == 1:
                return time.perf_counter() - start, *main_thread(proc.pid)
    finally:
        proc.stdin.close()
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "ENGRAM_EMBEDDER"}
        env["ENGRAM_HOME"] = tmp
        subprocess.run([ENGRAM, "remember", "--agent", AGENT, "User lives in Berlin"], env=env, check=True)
        print(f"load average at start: {os.getloadavg()[0]:.1f}")
        runs: dict[str, list[tuple[float, float, float]]] = {"serve: /healthz": [], "mcp: initialize": []}
        for _ in range(args.repeats):
            runs["serve: /healthz"].append(serve(env))
            runs["mcp: initialize"].append(mcp(env))
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(f"\nmain thread to the first answer, medians of {args.repeats}, seconds")
    print(f"{'case':<18}{'wall':>7}{'on a core':>11}{'waiting for one':>17}{'asleep/blocked':>16}")
    for case, samples in runs.items():
        asleep = [wall - on_cpu - waiting for wall, on_cpu, waiting in samples]
        wall, on_cpu, waiting = (statistics.median(column) for column in zip(*samples, strict=True))
        print(f"{case:<18}{wall:>7.2f}{on_cpu:>11.2f}{waiting:>17.2f}{statistics.median(asleep):>16.2f}")


if __name__ == "__main__":
    main()
