"""The figures every pass reports alike: rows scanned, rows acted on, rows skipped, its duration, and its lease wait.

Each pass's report counts in its own words (decay's ``processed``, ``updated`` and ``pruned``, the
contradictions' ``scanned`` and ``flagged``); :data:`COUNTS` says once, per report type, which of its fields
are the rows it read, the rows it changed, and the rows it left (already done, over a quota, or edited
concurrently). :func:`pass_metrics` reads those figures from any pass's report, a shard sweep's (summed over
its agents) or the pipeline's (summed over its stages), so the Dagster metadata (``assets/_report.py``) and the
Prometheus textfile (:func:`write_textfile`) carry the same keys for every pass.

A textfile is what node_exporter's textfile collector (``--collector.textfile.directory``) serves: the process
that ran the pass writes ``<ENGRAM_METRICS_DIR>/engram_pass_<pass>_<partition>.prom``, one file per pass and
partition, replaced whole (written aside, then renamed) after each run, so the collector never reads half a
file and a file holds the last run of its pass and partition, whichever worker ran it.

>>> from engram_pipeline.lifecycle.decay import DecayReport
>>> report = DecayReport(processed=10, updated=4, stale=1, pruned=2, skipped_concurrent_edit=1, cursor={})
>>> pass_metrics(report, duration_s=0.5)
PassMetrics(rows_scanned=10, rows_acted_on=6, rows_skipped=1, duration_s=0.5, lease_waited_s=0.0)
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from engram_pipeline.lifecycle.archival import ArchivalReport
from engram_pipeline.lifecycle.beliefs import BeliefReport
from engram_pipeline.lifecycle.confidence import ConfidenceDecayReport
from engram_pipeline.lifecycle.consolidation import ConsolidationReport
from engram_pipeline.lifecycle.contradictions import ContradictionReport
from engram_pipeline.lifecycle.corpus_merge import CorpusMergeReport
from engram_pipeline.lifecycle.decay import DecayReport
from engram_pipeline.lifecycle.episodes import EpisodeClusters
from engram_pipeline.lifecycle.health import HealthReport
from engram_pipeline.lifecycle.merge_review import DiscardReport
from engram_pipeline.lifecycle.pipeline import PipelineReport
from engram_pipeline.lifecycle.procedures import ProcedureReport
from engram_pipeline.lifecycle.promotion import PromotionReport
from engram_pipeline.lifecycle.schemas import SchemaReport
from engram_pipeline.lifecycle.sweep import SweepReport
from engram_pipeline.prometheus import sample
from engram_pipeline.reporting import report_fields
from engram_pipeline.store.maintain import MaintenanceReport


@dataclass(frozen=True)
class PassMetrics:
    """What one run of a pass did, in the words every pass shares (the Dagster metadata keys)."""

    rows_scanned: int  # rows the pass read to decide
    rows_acted_on: int  # rows it wrote: promoted, re-scored, pruned, flagged, merged, created, archived, ...
    rows_skipped: int  # rows it decided to leave: edited concurrently (compare-and-set missed), over a quota, ...
    duration_s: float
    lease_waited_s: float = 0.0  # how long it waited for another run of the same pass (and agent or shard)

    def as_dict(self) -> dict[str, int | float]:
        return {name: getattr(self, name) for name in PASS_KEYS}


PASS_KEYS = tuple(f.name for f in fields(PassMetrics))  # the metadata keys every pass's materialization carries


# report type -> (fields counting rows scanned, rows acted on, rows skipped). A field a dry run renames (a plan's
# ``merged``, shown as ``would_merge``: engram_pipeline.reporting) is not found in a dry run's report, so a plan
# acts on no row. A report type without an entry is refused (a new pass must say what it counts).
COUNTS: dict[type, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    PromotionReport: (("processed",), ("promoted", "expired"), ("skipped", "skipped_concurrent_edit")),
    DecayReport: (("processed",), ("updated", "pruned"), ("skipped_concurrent_edit",)),  # stale: within updated
    ConfidenceDecayReport: (("processed",), ("decayed_count", "archived_count"), ("skipped_concurrent_edit",)),
    ContradictionReport: (("scanned",), ("flagged", "superseded"), ("skipped_concurrent_edit",)),
    CorpusMergeReport: (("scanned",), ("merged",), ("skipped_concurrent_edit",)),
    EpisodeClusters: (("episodes_scanned",), (), ()),  # a read: the clusters go to the next stages
    BeliefReport: ((), ("beliefs_created", "beliefs_reinforced"), ("skipped_concurrent_edit",)),
    ProcedureReport: (
        ("episodes_scanned",),
        ("procedures_created", "procedures_reinforced"),
        ("skipped_concurrent_edit",),
    ),
    SchemaReport: (("sources_scanned",), ("schemas_created", "schemas_updated"), ("skipped_concurrent_edit",)),
    ArchivalReport: (("candidates",), ("archived",), ("skipped_concurrent_edit",)),
    ConsolidationReport: (
        ("episodes_scanned",),
        (
            "beliefs_created",
            "beliefs_reinforced",
            "procedures_created",
            "procedures_reinforced",
            "schemas_created",
            "schemas_updated",
            "archived",
        ),
        ("skipped_concurrent_edit",),
    ),
    HealthReport: (("total",), (), ()),  # a read
    DiscardReport: ((), (), ()),  # closes a plan; no memory row is read or written
    MaintenanceReport: ((), (), ()),  # compacts tables; no row is decided
}


# What a run found in the store, for the alerts on growth and on unreviewed plans (docs/operate.md): report type
# -> gauge name -> its value in one report; a run's value is the sum over its agents (a shard's, or one agent's).
GAUGES: dict[type, dict[str, Callable[[Any], int]]] = {
    HealthReport: {
        "engram_rows_visible": lambda r: r.visible,
        "engram_rows_total": lambda r: r.total,
        "engram_rows_stale": lambda r: r.stale_count,
        "engram_contradictions_active": lambda r: r.active_contradictions,
    },
    CorpusMergeReport: {  # a plan (dry run) is the agent's pending plan, new or the same as the last one
        "engram_merge_plans_pending": lambda r: int(r.dry_run and bool(r.plan_id) and r.clusters > 0),
        "engram_merge_members_pending": lambda r: r.merged if r.dry_run and r.plan_id else 0,
    },
}


def pass_metrics(report: Any, *, duration_s: float) -> PassMetrics:
    """The :class:`PassMetrics` of ``report`` (any type in :data:`COUNTS`, a :class:`SweepReport` of them, or a
    :class:`PipelineReport`), which took ``duration_s``."""
    scanned, acted, skipped, waits = _counts(report)
    return PassMetrics(scanned, acted, skipped, duration_s, round(float(sum(waits.values())), 3))


def _counts(report: Any) -> tuple[int, int, int, dict[str, float]]:
    """Rows scanned, acted on and skipped, and the lease waits by cursor (a sweep's agents in one shard share
    their shard's cursor: its wait counts once)."""
    if isinstance(report, SweepReport | PipelineReport):
        parts = report.agents.values() if isinstance(report, SweepReport) else _stages(report)
        total = [0, 0, 0]
        waits: dict[str, float] = {}
        for part in parts:
            *counts, part_waits = _counts(part)
            total = [t + c for t, c in zip(total, counts, strict=True)]
            waits |= part_waits
        return total[0], total[1], total[2], waits
    if type(report) not in COUNTS:
        raise TypeError(f"{type(report).__name__} is not in engram_pipeline.pass_metrics.COUNTS: say what it counts")
    values = report_fields(report)
    scanned, acted, skipped = (sum(int(values.get(name) or 0) for name in names) for names in COUNTS[type(report)])
    cursor = values.get("cursor")
    waits = {}
    if isinstance(cursor, Mapping) and cursor.get("lease_waited_s"):
        waits[repr(sorted(cursor.items()))] = float(cursor["lease_waited_s"])
    return scanned, acted, skipped, waits


def _stages(report: PipelineReport) -> list[Any]:
    return [getattr(report, f.name) for f in fields(report)]


def store_gauges(report: Any) -> dict[str, int]:
    """:data:`GAUGES` of the reports in ``report`` (one of their types, a sweep of them, or a pipeline run's
    stages), summed; empty when it holds none."""
    if isinstance(report, SweepReport | PipelineReport):
        parts = report.agents.values() if isinstance(report, SweepReport) else _stages(report)
        out: dict[str, int] = {}
        for part in parts:
            for name, value in store_gauges(part).items():
                out[name] = out.get(name, 0) + value
        return out
    return {name: int(value(report)) for name, value in GAUGES.get(type(report), {}).items()}


# The textfile's series: metric name -> the PassMetrics field it carries (every one a gauge of the last run).
SERIES = {
    "engram_pass_rows_scanned": "rows_scanned",
    "engram_pass_rows_acted_on": "rows_acted_on",
    "engram_pass_rows_skipped": "rows_skipped",
    "engram_pass_duration_seconds": "duration_s",
    "engram_pass_lease_waited_seconds": "lease_waited_s",
}
FINISHED = "engram_pass_last_finished_timestamp_seconds"  # when the run ended (Unix time)


def textfile(
    pass_name: str,
    partition: str,
    metrics: PassMetrics,
    *,
    finished_at: float,
    gauges: Mapping[str, float] | None = None,
) -> str:
    """The Prometheus text of one run of ``pass_name`` over ``partition`` (a shard number, an agent id, or
    empty for an unpartitioned pass), with the run's ``gauges`` (:func:`store_gauges`) if any."""
    labels = {"pass": pass_name, "partition": partition}
    lines: list[str] = []
    series = [*((n, getattr(metrics, f)) for n, f in SERIES.items()), (FINISHED, finished_at), *(gauges or {}).items()]
    for name, value in series:
        lines += [f"# TYPE {name} gauge", sample(name, value, labels)]
    return "\n".join(lines) + "\n"


def write_textfile(
    directory: str | Path,
    pass_name: str,
    partition: str,
    metrics: PassMetrics,
    *,
    finished_at: float,
    gauges: Mapping[str, float] | None = None,
) -> Path:
    """Replace the textfile of ``pass_name`` and ``partition`` in ``directory`` (made if missing) with this run's
    metrics; returns its path. The name is readable and unique: the labels cut to safe characters, and a
    hash of them (an agent id is user input)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{pass_name}_{partition}".strip("_"))[:80]
    digest = hashlib.sha256(f"{pass_name}\0{partition}".encode()).hexdigest()[:12]
    path = directory / f"engram_pass_{safe}_{digest}.prom"
    text = textfile(pass_name, partition, metrics, finished_at=finished_at, gauges=gauges)
    # The collector reads only *.prom: write beside it under another name, then rename over it (atomic).
    fd, aside = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(aside, 0o644)
        os.replace(aside, path)
    except BaseException:
        Path(aside).unlink(missing_ok=True)
        raise
    return path
