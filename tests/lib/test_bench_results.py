"""bench/results.py: a benchmark's figures land as one JSON line per run, with the commit and the arguments, and
the last runs print back; every ``bench/bench_*.py`` saves its figures so, from its main."""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from results import Results  # noqa: E402


def test_each_run_is_one_line_with_its_commit_arguments_and_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_BENCH_RESULTS", str(tmp_path))
    assert Results("demo").save() is None, "a run that recorded nothing writes nothing"
    for p50 in (5.123456, 6.0):
        run = Results("demo", argparse.Namespace(rows=1000))
        run.add("single", rows=1000, p50_ms=p50)
        run.add("single", rows=100000, p50_ms=p50 * 2)
        run.add("ratio", of_nothing=float("nan"), nested={"runs": [float("nan"), 1 / 3]})
        run.save()
    lines = [json.loads(x) for x in (tmp_path / "demo.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 2
    first = lines[0]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert first["commit"] == head.stdout.strip() and first["args"] == {"rows": 1000}
    assert first["figures"]["single"] == [{"rows": 1000, "p50_ms": 5.1235}, {"rows": 100000, "p50_ms": 10.2469}]
    assert first["figures"]["ratio"] == {"of_nothing": None, "nested": {"runs": [None, 0.3333]}}  # strict JSON
    shown = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "results.py"), "demo", "--last", "1"],
        capture_output=True,
        text=True,
        env={"ENGRAM_BENCH_RESULTS": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert shown.returncode == 0 and json.loads(shown.stdout)["figures"]["single"][0]["p50_ms"] == 6.0


BENCHMARKS = sorted((ROOT / "bench").glob("bench_*.py"))


def _calls(tree: ast.Module) -> tuple[list[ast.Call], list[ast.Call]]:
    """The calls made inside a function (what runs when ``main`` does) and those made at import time (what runs
    when another script imports this one for a helper)."""
    inside = {id(n): n for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) for n in ast.walk(fn)}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    return [c for c in calls if id(c) in inside], [c for c in calls if id(c) not in inside]


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda path: path.stem)
def test_every_benchmark_saves_its_figures_from_its_main(script: Path) -> None:
    name = script.stem.removeprefix("bench_")
    inside, at_import = _calls(ast.parse(script.read_text(encoding="utf-8")))

    def named(calls: list[ast.Call], fn: str) -> list[ast.Call]:
        return [c for c in calls if fn in (getattr(c.func, "id", None), getattr(c.func, "attr", None))]

    made = [c.args[0].value for c in named(inside, "Results") if c.args and isinstance(c.args[0], ast.Constant)]
    assert made == [name], f"{script.name} should collect its figures in one Results({name!r})"
    assert [c for c in named(inside, "save") if not c.args], f"{script.name} should save its figures at its end"
    assert not named(at_import, "Results") + named(at_import, "save"), f"{script.name} saves when imported"


def test_make_bench_runs_every_benchmark_but_those_needing_the_cluster() -> None:
    """``make bench`` (bench/run_all.py) is every ``bench/bench_*.py`` at quick sizes, apart from the ones it names
    as needing the local cluster."""
    import run_all  # bench/run_all.py

    scripts = {p.stem.removeprefix("bench_") for p in (ROOT / "bench").glob("bench_*.py")}
    assert set(run_all.BENCHES).isdisjoint(run_all.NEEDS_CLUSTER)
    assert set(run_all.BENCHES) | set(run_all.NEEDS_CLUSTER) == scripts
