"""Benchmark figures as JSON next to the printed tables, so a figure can be compared across commits.

A script collects its figures in a :class:`Results` and saves them at its end: one JSON line appended to
``bench/results/<script>.jsonl`` (``ENGRAM_BENCH_RESULTS`` names another folder; the folder is not tracked),
holding the commit and whether the tree had changes, the time, the machine's cores and load, the script's
arguments and its figures by section. Two commits' figures are then two lines of one file::

    python bench/bench_store_verbs.py --rows 5000
    git checkout other-commit && python bench/bench_store_verbs.py --rows 5000
    python bench/results.py store_verbs          # the last runs, one line each
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def folder() -> Path:
    return Path(os.environ.get("ENGRAM_BENCH_RESULTS") or ROOT / "bench" / "results")


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip()


class Results:
    """The figures of one run of ``script`` (the file name without ``bench_`` and ``.py``), by section."""

    def __init__(self, script: str, args: argparse.Namespace | None = None) -> None:
        self.script = script
        self.args = dict(vars(args)) if args is not None else {}
        self.sections: dict[str, Any] = {}

    def add(self, section: str, **figures: Any) -> None:
        """Record ``figures`` under ``section`` (a section given twice keeps a list of its records); floats are
        kept to 4 decimals, and a NaN or an infinity (a ratio of nothing) is null, so each line is strict JSON."""
        figures = {k: _number(v) for k, v in figures.items()}
        if section in self.sections:
            held = self.sections[section]
            self.sections[section] = [*held, figures] if isinstance(held, list) else [held, figures]
        else:
            self.sections[section] = figures

    def save(self) -> Path | None:
        """Append this run to its file and say where (stderr); nothing when no figure was recorded."""
        if not self.sections:
            return None
        record = {
            "script": self.script,
            "commit": _git("rev-parse", "--short", "HEAD"),
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "cores": os.cpu_count(),
            "load": [round(x, 2) for x in os.getloadavg()],
            "args": self.args,
            "figures": self.sections,
        }
        path = folder() / f"{self.script}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, default=str, allow_nan=False) + "\n")
        print(f"figures appended to {path}", file=sys.stderr)
        return path


def _number(value: Any) -> Any:
    """``value`` with every float (in lists and dicts too) kept to 4 decimals, and NaN or an infinity as None."""
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _number(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_number(v) for v in value]
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description="Print the last recorded runs of a benchmark, one JSON line each.")
    ap.add_argument("script", help="the benchmark's name without bench_ and .py (store_verbs, write_path, ...)")
    ap.add_argument("--last", type=int, default=5)
    args = ap.parse_args()
    path = folder() / f"{args.script}.jsonl"
    if not path.is_file():
        print(f"no figures recorded for {args.script!r} in {folder()}", file=sys.stderr)
        return 1
    for line in path.read_text(encoding="utf-8").splitlines()[-args.last :]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
