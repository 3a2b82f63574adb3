"""Time to first answer of a fresh process: CLI commands, ``engram serve`` and ``engram mcp`` (issue 36).

Every case starts a new process and times it from the spawn to its first answer:

- a CLI command: to its exit (``engram --version``; ``get``, which embeds nothing; ``recall`` and ``remember``,
  which embed their text);
- ``engram serve``: to the first 200 of ``GET /healthz``, then to the first 200 of a recall
  (``POST /v1/memories/recall``, which embeds the query);
- ``engram mcp``: to its answer to ``initialize`` on stdin, then to the answer of a ``tools/call`` of ``recall``.

Each is measured as wall seconds and as the CPU seconds (user + system) the process had used by then (from
``/proc/PID/stat`` at the answer, or from ``wait4`` for a command that exits): on a loaded machine the wall
time mostly measures the queue for a core, the CPU time what the process costs. The figures are medians over
``--repeats``, and each is also given as a ratio to references measured in the same run, alternated with the
cases: ``python -c pass`` (the interpreter) and ``python -c "import engram_pipeline"`` (the package); with
MiniLM also ``python -c "import sentence_transformers"``, what a process paid before the model itself while
the library ran it through sentence-transformers (before ``ebf8ca5``).

    python bench/bench_startup.py                                  # MiniLM (the default) and hashing, 3 repeats
    python bench/bench_startup.py --embedders hashing --repeats 5
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from results import Results  # bench/results.py

BIN = Path(sys.executable).parent
ENGRAM = str(BIN / "engram")
TICK = os.sysconf("SC_CLK_TCK")
AGENT = "bench"
QUERY = "where does the user live"
TIMEOUT = 600.0  # seconds a case may take on a loaded machine before the run fails


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime: fields 14 and 15 of stat


def run_to_exit(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``argv`` run to its exit (which must be 0)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
    return wall, usage.ru_utime + usage.ru_stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(port: int, method: str, path: str, body: dict[str, object] | None = None) -> int:
    """The status of one request, or 0 when the server does not answer yet."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        data = None if body is None else json.dumps(body)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        status = conn.getresponse().status
        conn.close()
        return status
    except OSError:
        return 0


def _until(
    start: float, pid: int, ok: Callable[[], bool], what: str, proc: subprocess.Popen[bytes]
) -> tuple[float, float]:
    while not ok():
        if proc.poll() is not None:
            raise SystemExit(f"{what}: the process exited with {proc.returncode}")
        if time.perf_counter() - start > TIMEOUT:
            raise SystemExit(f"{what}: no answer after {TIMEOUT} s")
        time.sleep(0.01)
    return time.perf_counter() - start, cpu_of(pid)


def serve(db: str, env: dict[str, str]) -> dict[str, tuple[float, float]]:
    """``engram serve``: wall and CPU to the first /healthz 200 and to the first recall 200."""
    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [ENGRAM, "--db", db, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        health = _until(start, proc.pid, lambda: _http(port, "GET", "/healthz") == 200, "serve /healthz", proc)
        body = {"agent_id": AGENT, "query": QUERY, "k": 3}
        recall = _until(
            start, proc.pid, lambda: _http(port, "POST", "/v1/memories/recall", body) == 200, "recall", proc
        )
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"serve: /healthz": health, "serve: first recall": recall}


def mcp(db: str, env: dict[str, str]) -> dict[str, tuple[float, float]]:
    """``engram mcp``: wall and CPU to the answer to ``initialize`` and to a ``tools/call`` of recall."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [ENGRAM, "--db", db, "mcp", "--agent", AGENT],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def send(message: dict[str, object]) -> None:
        stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        stdin.flush()

    def answer(request_id: int, what: str) -> tuple[float, float]:
        while True:
            ready, _, _ = select.select([stdout], [], [], TIMEOUT)
            line = stdout.readline() if ready else b""
            if not line:
                raise SystemExit(f"mcp {what}: no answer (exit {proc.poll()})")
            message = json.loads(line)
            if message.get("id") == request_id:
                if "error" in message or message.get("result", {}).get("isError"):
                    raise SystemExit(f"mcp {what}: {message}")
                return time.perf_counter() - start, cpu_of(proc.pid)

    try:
        info = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        send({"id": 1, "method": "initialize", "params": info})
        initialized = answer(1, "initialize")
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": QUERY, "k": 3}}})
        recall = answer(2, "recall")
    finally:
        stdin.close()
        proc.terminate()
        proc.wait(timeout=60)
    return {"mcp: initialize": initialized, "mcp: first recall": recall}


def first_id(db: str, env: dict[str, str]) -> str:
    """The id of a memory of the store (made with ``engram remember`` if the store is new)."""
    made = subprocess.run(
        [ENGRAM, "--db", db, "--json", "remember", "--agent", AGENT, "User lives in Berlin"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return str(json.loads(made.stdout)["memory"]["id"])


def measure(embedder: str, repeats: int, tmp: Path) -> dict[str, list[tuple[float, float]]]:
    env = {**os.environ, "ENGRAM_EMBEDDER": embedder, "ENGRAM_HOME": str(tmp / embedder)}
    db = str(tmp / embedder / "lancedb")
    memory_id = first_id(db, env)  # the store exists before anything is timed
    python = [sys.executable, "-c"]
    cases: dict[str, Callable[[int], list[str]]] = {
        "ref: python -c pass": lambda i: [*python, "pass"],
        "ref: import engram_pipeline": lambda i: [*python, "import engram_pipeline"],
        "engram --version": lambda i: [ENGRAM, "--version"],
        "engram get": lambda i: [ENGRAM, "--db", db, "get", memory_id],
        "engram recall": lambda i: [ENGRAM, "--db", db, "recall", "--agent", AGENT, QUERY],
        "engram remember": lambda i: [ENGRAM, "--db", db, "remember", "--agent", AGENT, f"User visited city {i}"],
    }
    if embedder == "minilm":
        cases["ref: import sentence_transformers"] = lambda i: [*python, "import sentence_transformers"]
    out: dict[str, list[tuple[float, float]]] = {}
    for i in range(repeats):  # alternated, so that a change of load falls on every case alike
        for name, argv in cases.items():
            out.setdefault(name, []).append(run_to_exit(argv(i), env))
        for name, figures in {**serve(db, env), **mcp(db, env)}.items():
            out.setdefault(name, []).append(figures)
        print(f"  {embedder}: repeat {i + 1} of {repeats} done", file=sys.stderr, flush=True)
    return out


def report(embedder: str, runs: dict[str, list[tuple[float, float]]], results: Results) -> None:
    med = {name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for name, r in runs.items()}
    ref_pass, ref_pkg = med["ref: python -c pass"], med["ref: import engram_pipeline"]
    print(f"\nENGRAM_EMBEDDER={embedder}, medians of {len(next(iter(runs.values())))} runs")
    header = f"{'case':<36} {'wall s':>8} {'CPU s':>7} {'wall/pass':>10} {'CPU/pass':>9} {'wall/pkg':>9} {'CPU/pkg':>8}"
    print(header)
    print("-" * len(header))
    for name, (wall, cpu) in med.items():
        ratios = [wall / ref_pass[0], cpu / max(ref_pass[1], 1e-3), wall / ref_pkg[0], cpu / max(ref_pkg[1], 1e-3)]
        print(
            f"{name:<36} {wall:>8.2f} {cpu:>7.2f} "
            + " ".join(f"{r:>{w}.1f}x" for r, w in zip(ratios, (9, 8, 8, 7), strict=True))
        )
        names = ("wall_over_pass", "cpu_over_pass", "wall_over_pkg", "cpu_over_pkg")
        results.add(
            "medians",
            embedder=embedder,
            case=name,
            runs=len(runs[name]),
            wall_s=wall,
            cpu_s=cpu,
            **dict(zip(names, ratios, strict=True)),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", nargs="+", default=["minilm", "hashing"], choices=["minilm", "hashing"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = Results("startup", args)
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.1f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for embedder in args.embedders:
            report(embedder, measure(embedder, args.repeats, Path(tmp)), results)
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")
    results.add("load_average", start=load, end=os.getloadavg()[0])
    results.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
