"""Real worker processes for the reliability tests: ``python store_procs.py COMMAND URI [ARGS...]``, or
:func:`fork_worker` (a child of a ``forkserver`` that has the library imported: ~50 ms to start, not ~2 s).

Each command opens the store at URI (hashing embedder), waits for the file named by ``ENGRAM_TEST_GO`` (if
set) so that racing workers start together, does one thing and prints one JSON line. ``ENGRAM_TEST_KILL_AT=N``
SIGKILLs the process at its N-th store commit boundary (entry into or exit from a method that commits), to
kill it in every window between two commits.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SEED_POLICY = {"ENGRAM_RETENTION_POLICY": "seed"}  # as tests/conftest.py (this file also runs as a script)
# The verbs that commit, on the store's engine or on the collaborator that owns the table (``audit.record``).
COMMITTING = (
    "cas_write", "cas_delete", "audit.record", "audit.drop", "links.add", "cursors.set",
    "plans.mark_applied", "plans.save_many", "plans.close_many", "cursors.swap_lease", "cursors.set_many",
    "insert_rows",
)  # fmt: skip


def spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``store_procs.py ARGS`` with the repository on the path."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, str(Path(__file__)), *args], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def fork_worker(*args: str, env: dict[str, str] | None = None) -> Any:
    """Start ``COMMAND URI ARGS`` in a forkserver child (a fresh process); its result goes to ``ENGRAM_TEST_OUT``."""
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["engram_pipeline.store", "engram_pipeline.lifecycle", "polars", "lancedb"])
    proc = ctx.Process(target=_child, args=(list(args), env or {}))
    proc.start()
    return proc


def _child(argv: list[str], env: dict[str, str]) -> None:
    os.environ.update(env)
    text = run(argv)
    out = os.environ.get("ENGRAM_TEST_OUT")
    if out:
        Path(out).write_text(text)


def run_all(procs: Sequence[subprocess.Popen[str]], timeout: float = 120) -> list[tuple[int, Any, str]]:
    """Wait for every process; (return code, parsed JSON of the last stdout line or None, stderr)."""
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        lines = [line for line in stdout.splitlines() if line.strip()]
        out.append((p.returncode, json.loads(lines[-1]) if lines and p.returncode == 0 else None, stderr))
    return out


def _open(uri: str) -> Any:
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore

    # the races prune by score and age: the seed retention policy's (the default prunes only merged duplicates)
    return MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **SEED_POLICY}))


def _arm_kill(store: Any) -> list[int]:
    """Count commit boundaries (``ENGRAM_TEST_KILL_AT`` < 0: only count) and die at the N-th."""
    at = int(os.environ.get("ENGRAM_TEST_KILL_AT", "0"))
    seen = [0]
    if not at:
        return seen

    def tick() -> None:
        seen[0] += 1
        if seen[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*a: Any, **kw: Any) -> Any:
            tick()
            result = method(*a, **kw)
            tick()
            return result

        return wrapped

    for path in COMMITTING:
        *parts, name = path.split(".")
        owner = store.engine  # the verbs that commit are the engine's
        for part in parts:
            owner = getattr(owner, part)
        setattr(owner, name, wrap(getattr(owner, name)))
    return seen


def _wait_go() -> None:
    go = os.environ.get("ENGRAM_TEST_GO")
    if go:
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.005)


def _report(obj: Any) -> str:
    data = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj
    return json.dumps(data, default=str)


def main(argv: list[str]) -> None:
    print(run(argv, ready=lambda: print(json.dumps({"ready": os.getpid()}), flush=True)), flush=True)


def run(argv: list[str], ready: Callable[[], None] | None = None) -> str:
    command, uri, *rest = argv
    store = _open(uri)
    ticks = _arm_kill(store)
    if ready is not None:
        ready()
    _wait_go()
    report: Any
    if command == "decay":
        from engram_pipeline.lifecycle.decay import decay_importance

        agent, now, batch = rest
        report = decay_importance(store, agent, now=datetime.fromisoformat(now), batch_size=int(batch))
    elif command == "apply":
        from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge

        agent, plan_id, now, batch = rest
        report = apply_corpus_merge(store, agent, plan_id, now=datetime.fromisoformat(now), batch_size=int(batch))
    elif command == "sweep":  # a columnar sweep: sweep PASS NOW BATCH AGENT...; the report is per agent
        from engram_pipeline.lifecycle.sweep import COLUMNAR

        name, now, batch, *agents = rest
        reports = COLUMNAR[name](store, agents, now=datetime.fromisoformat(now), batch_size=int(batch))
        report = {agent: dataclasses.asdict(r) for agent, r in reports.items()}
    elif command == "consolidation":  # the five stages swept: consolidation NOW AGENT...; the report is per agent
        from engram_pipeline.lifecycle.consolidation import consolidation_sweep

        now, *agents = rest
        reports = consolidation_sweep(store, agents, now=datetime.fromisoformat(now))
        report = {agent: dataclasses.asdict(r) for agent, r in reports.items()}
    elif command == "plan_sweep":  # the corpus merge plan over a set of agents: plan_sweep NOW AGENT...
        from engram_pipeline.lifecycle.corpus_merge import plan_sweep

        now, *agents = rest
        planned = plan_sweep(store, agents, now=datetime.fromisoformat(now))
        report = {agent: dataclasses.asdict(r) for agent, r in planned.items()}
    elif command in PASSES:
        agent, now, batch = rest
        report = PASSES[command]()(store, agent, now=datetime.fromisoformat(now), batch_size=int(batch))
    elif command == "remember":
        agent, *contents = rest
        report = [
            {"id": r.memory["id"], "outcome": r.outcome} for r in (store.remember(agent, c) for c in contents)
        ]  # fmt: skip
    elif command == "restore":  # restore each id in turn: restore ID...; the outcome of each
        report = [_restore(store, i) for i in rest]
    elif command == "write":  # compare-and-set writes on SAMPLE random rows of the agent for SECONDS
        agent, seconds, sample = rest
        report = _write_loop(store, agent, float(seconds), int(sample))
    elif command == "delete":  # one audited compare-and-set delete of the rows at version 1
        run_id, *ids = rest
        result = store.engine.cas_delete({i: 1 for i in ids}, actor="test", action="prune", run_id=run_id)
        report = {"applied": list(result.applied), "skipped": list(result.skipped_concurrent_edit)}
    elif command == "maintain":
        report = store.maintain()
    else:
        raise SystemExit(f"unknown command {command!r}")
    data = json.loads(_report(report))
    return json.dumps({**data, "ticks": ticks[0]} if isinstance(data, dict) else data)


def _restore(store: Any, memory_id: str) -> str:
    """``restored``, or what a refused restore was told: ``duplicate``, ``nothing`` (to restore), ``conflict``."""
    from engram_pipeline.store import NothingToRestore, RestoreDuplicate, VersionConflict

    try:
        store.restore(memory_id, actor="test")
    except RestoreDuplicate:
        return "duplicate"
    except NothingToRestore:
        return "nothing"
    except VersionConflict:
        return "conflict"
    return "restored"


def _promote() -> Callable[..., Any]:
    from engram_pipeline.lifecycle.promotion import promote_stm

    return promote_stm


def _decay_confidence() -> Callable[..., Any]:
    from engram_pipeline.lifecycle.confidence import decay_confidence

    return decay_confidence


def _contradictions() -> Callable[..., Any]:
    from engram_pipeline.lifecycle.contradictions import detect_contradictions

    return detect_contradictions


def _archive() -> Callable[..., Any]:
    from engram_pipeline.lifecycle.archival import archive_faded

    return archive_faded


# Passes run as ``COMMAND URI AGENT NOW BATCH_SIZE``.
PASSES: dict[str, Callable[[], Callable[..., Any]]] = {
    "promote": _promote,
    "decay_confidence": _decay_confidence,
    "contradictions": _contradictions,
    "archive": _archive,
}


def _write_loop(store: Any, agent: str, seconds: float, sample: int) -> dict[str, int]:
    """Batched CAS writes bumping ``reinforcement_count`` (one commit each), as a busy pass would."""
    import random

    rng = random.Random(os.getpid())
    applied = commits = 0
    ids = store.engine.scan(agent, columns=["id"])["id"].to_pylist()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rows = store.get_many(rng.sample(ids, min(sample, len(ids))), columns=["id", "version", "reinforcement_count"])
        changes = [
            {"id": r["id"], "version": r["version"], "reinforcement_count": (r["reinforcement_count"] or 0) + 1}
            for r in rows
        ]  # fmt: skip
        result = store.engine.cas_write(changes, actor="test", action="bump")
        applied += len(result.applied)
        commits += 1
    return {"applied": applied, "commits": commits}


if __name__ == "__main__":
    main(sys.argv[1:])
