"""A pass process of the object-storage concurrency test: ``python pass_worker.py AGENT ROUNDS GO OUT.json``.

Opens the store of ``ENGRAM_DB_URI`` (with ``ENGRAM_STORAGE_OPTIONS``), waits for the file GO so that every
process starts together, runs importance decay on AGENT ROUNDS times with the clock a day further each round (so
every round re-scores, and commits, every row) and writes the reports as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.model import utcnow
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore


def main(agent: str, rounds: int, go: str, out: str) -> None:
    store = MemoryStore.open(settings=Settings.from_env())
    while not Path(go).exists():
        time.sleep(0.05)
    start, reports = utcnow(), []
    for i in range(rounds):
        report = decay_importance(store, agent, now=start + timedelta(days=i + 1), run_id=f"{agent}-{i}")
        reports.append({k: v for k, v in dataclasses.asdict(report).items() if k != "cursor"})
    Path(out).write_text(json.dumps(reports))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
