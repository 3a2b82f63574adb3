"""Every pass reports the same five figures (rows scanned, acted on, skipped, duration, lease wait) as Dagster
metadata, and a process with ``ENGRAM_METRICS_DIR`` set writes them as a Prometheus textfile that holds the
same numbers (``engram_pipeline/pass_metrics.py``)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, materialize

from assets.definitions import defs
from engram_pipeline.lifecycle.decay import DecayReport
from engram_pipeline.lifecycle.sweep import sweep
from engram_pipeline.pass_metrics import PASS_KEYS, SERIES, pass_metrics, store_gauges
from engram_pipeline.store import MemoryStore

AGENT = "coding-assistant"
SAMPLE = re.compile(r'^(\w+)\{partition="((?:[^"\\]|\\.)*)",pass="((?:[^"\\]|\\.)*)"\} (\S+)$')


def read_textfiles(directory: Path) -> dict[tuple[str, str], dict[str, float]]:
    """Every ``*.prom`` file of ``directory`` parsed: (pass, partition) -> metric name -> value. A line that is
    neither a ``# TYPE`` comment nor a sample of this shape fails the test."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for path in sorted(directory.glob("*.prom")):
        for line in path.read_text().splitlines():
            if line.startswith("# TYPE "):
                assert line.endswith(" gauge"), line
                continue
            match = SAMPLE.match(line)
            assert match, f"{path.name}: {line!r}"
            name, partition, pass_name, value = match.groups()
            out.setdefault((pass_name, partition), {})[name] = float(value)
    return out


def pass_asset(name: str) -> Any:
    return next(a for a in defs.assets or [] if getattr(a, "key", None) and a.key.to_user_string() == name)


def test_decay_reports_its_rows_as_every_pass_does_and_writes_them_for_prometheus(
    resources: dict[str, Any], instance: DagsterInstance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics_dir = tmp_path / "metrics"
    monkeypatch.setenv("ENGRAM_METRICS_DIR", str(metrics_dir))
    result = materialize(
        [pass_asset("importance_decay")], partition_key=AGENT, resources=resources, instance=instance
    )
    meta = {k: v.value for k, v in result.asset_materializations_for_node("importance_decay")[0].metadata.items()}
    assert set(PASS_KEYS) <= set(meta)
    assert meta["rows_scanned"] == meta["processed"] > 0
    assert meta["rows_acted_on"] == meta["updated"] + meta["pruned"] > 0  # stale rows are among the updated
    assert meta["rows_skipped"] == meta["skipped_concurrent_edit"]

    scraped = read_textfiles(metrics_dir)
    assert set(scraped) == {("importance_decay", AGENT)}
    series = scraped["importance_decay", AGENT]
    for name, key in SERIES.items():
        assert series[name] == pytest.approx(meta[key], abs=1e-3), name
    assert series["engram_pass_last_finished_timestamp_seconds"] > 1.7e9


def test_a_pipeline_sweep_sums_its_stages_and_an_unknown_report_is_refused(seeded: MemoryStore) -> None:
    report = sweep(seeded, "pipeline", seeded.agents())
    whole = pass_metrics(report, duration_s=1.0)
    stages = [pass_metrics(getattr(r, stage), duration_s=0) for r in report.agents.values() for stage in ("promotion",
              "decay", "confidence", "contradictions", "merge_plan", "consolidation", "health")]  # fmt: skip
    assert whole.rows_scanned == sum(m.rows_scanned for m in stages) > 0
    assert whole.rows_acted_on == sum(m.rows_acted_on for m in stages) > 0
    health = [r.health for r in report.agents.values()]
    gauges = store_gauges(report)
    assert gauges["engram_rows_visible"] == sum(h.visible for h in health)
    assert gauges["engram_rows_total"] == sum(h.total for h in health)
    some_hidden = replace(health[0], visible=health[0].total - 2)  # nothing is hidden yet in the sample corpus
    assert store_gauges(some_hidden)["engram_rows_visible"] == health[0].total - 2
    assert gauges["engram_merge_members_pending"] == sum(r.merge_plan.merged for r in report.agents.values())
    with pytest.raises(TypeError, match="COUNTS"):
        pass_metrics(object(), duration_s=0)
    plain = DecayReport(processed=3, updated=1, stale=1, pruned=1, skipped_concurrent_edit=1, cursor={})
    assert pass_metrics(plain, duration_s=0).as_dict() == {
        "rows_scanned": 3, "rows_acted_on": 2, "rows_skipped": 1, "duration_s": 0, "lease_waited_s": 0.0,
    }  # fmt: skip
