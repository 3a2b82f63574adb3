"""Report dataclass -> Dagster metadata: the one body every pass asset shares.

A pass returns a frozen report dataclass; :func:`run_pass` times the call and turns the report into a
``MaterializeResult`` whose metadata a reviewer reads in the UI: every count as a number (so the UI can plot
it across runs), ``skipped_concurrent_edit`` and the cursor, the duration, and a markdown summary. Every pass,
per agent or per shard, also carries the same five keys, ``rows_scanned``, ``rows_acted_on``, ``rows_skipped``,
``duration_s`` and ``lease_waited_s`` (:class:`~engram_pipeline.pass_metrics.PassMetrics`), which a process with
``ENGRAM_METRICS_DIR`` set also writes as a Prometheus textfile (:func:`pass_figures`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from dagster import (
    AssetExecutionContext,
    DagsterError,
    DagsterInvariantViolationError,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
)

from engram_pipeline.pass_metrics import pass_metrics, store_gauges, write_textfile
from engram_pipeline.reporting import json_value, report_fields

# The report's fields come from engram_pipeline.reporting, the serialiser the CLI, HTTP and MCP share.
# Lists longer than this are cut in the metadata (the UI is for reading, the store keeps everything).
MAX_LISTED = 50
# A shard run's per-agent table shows at most this many agents (the busiest) and figures; the totals count all.
MAX_AGENT_ROWS = 50
MAX_AGENT_COLUMNS = 12
READ_COUNTS = ("processed", "scanned", "candidates")  # the rows a pass read, not what it changed


def run_pass(title: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> MaterializeResult:
    """Call ``fn(*args, **kwargs)`` (a library pass) and report what it did."""
    report, seconds = timed(fn, *args, **kwargs)
    return MaterializeResult(metadata=report_metadata(title, report, duration_s=seconds))


def sweep_metadata(title: str, report: Any, *, duration_s: float) -> dict[str, Any]:
    """Metadata for a shard run (a :class:`~engram_pipeline.lifecycle.sweep.SweepReport`): the agents swept, each
    count summed over them, ``duration_s``, a markdown ``summary`` of the totals and an ``agents_table`` of
    per-agent figures (the busiest :data:`MAX_AGENT_ROWS` agents, the columns some agent has a non-zero value in)."""
    rows = {agent: flat_numbers(r) for agent, r in report.agents.items()}
    totals: dict[str, int] = {}
    for figures in rows.values():
        for name, value in figures.items():
            if isinstance(value, int):
                totals[name] = totals.get(name, 0) + value
    meta: dict[str, Any] = {"agents": MetadataValue.int(len(rows))}
    meta |= {name: MetadataValue.int(value) for name, value in totals.items()}
    meta |= pass_figures(report, duration_s=duration_s)
    heading = f"{title} over {len(rows):,} agents"
    meta["summary"] = MetadataValue.md(summary_md(heading, {"agents": len(rows), **totals}, duration_s))
    meta["agents_table"] = MetadataValue.md(agents_md(rows))
    return meta


def flat_numbers(report: Any, prefix: str = "") -> dict[str, int | float]:
    """The numeric fields of a report, nested reports' fields named ``outer.inner`` (a pipeline's
    ``decay.pruned``); booleans, text and collections are left out."""
    out: dict[str, int | float] = {}
    for name, value in report_fields(report).items():
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out |= flat_numbers(value, f"{prefix}{name}.")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[f"{prefix}{name}"] = value
    return out


def agents_md(rows: Mapping[str, Mapping[str, int | float]]) -> str:
    """Per-agent figures as a markdown table, the busiest agents first (most counted work, then agent id)."""
    names = [n for n in dict.fromkeys(n for r in rows.values() for n in r) if any(r.get(n) for r in rows.values())]
    # What a pass did before what it read: with too many figures, the counts of rows read go last.
    read_last = (
        sorted(names, key=lambda n: n.rsplit(".", 1)[-1] in READ_COUNTS) if len(names) > MAX_AGENT_COLUMNS else names
    )
    shown = read_last[:MAX_AGENT_COLUMNS]

    def work(agent: str) -> tuple[float, str]:
        return (-sum(v for v in rows[agent].values() if isinstance(v, int)), agent)

    agents = sorted(rows, key=work)[:MAX_AGENT_ROWS]
    lines = ["| agent | " + " | ".join(shown) + " |", "|---|" + "---:|" * len(shown)]
    for agent in agents:
        cells = [_figure(rows[agent].get(n, 0)) for n in shown]
        lines.append(f"| {md_cell(agent)} | " + " | ".join(cells) + " |")
    if not names:
        lines = ["*every agent's counts are zero*" if rows else "*no agents in this shard*"]
    notes = []
    if len(rows) > len(agents):
        notes.append(f"Shown: the {len(agents)} busiest of {len(rows):,} agents.")
    if len(names) > len(shown):
        notes.append(f"Not in this table (the counts are summed above): {', '.join(read_last[len(shown) :])}.")
    return "\n".join(lines + [f"\n*{note}*" for note in notes])


def _figure(value: int | float) -> str:
    return f"{round_float(value):g}" if isinstance(value, float) else str(value)


def run_id_of(context: AssetExecutionContext) -> str | None:
    """The Dagster run's id, which the pass records in its cursor and audit rows (so an audit event leads back
    to its run in the UI); None when the asset is called directly, outside a run (the library makes one)."""
    try:
        return context.run.run_id
    except DagsterError:  # DagsterInvalidPropertyError: no run when invoked directly
        return None


def location_of(context: AssetExecutionContext) -> str | None:
    """The code location the run was launched from (what the UI's links name); None for a run that did not
    come from one (``materialize``, ``execute_in_process``) or an asset called directly, outside a run."""
    try:
        origin = context.run.remote_job_origin
    except DagsterError:  # DagsterInvalidPropertyError: no run when invoked directly
        return None
    return None if origin is None else origin.location_name


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``fn(*args, **kwargs)`` and the seconds it took."""
    start = time.perf_counter()
    return fn(*args, **kwargs), time.perf_counter() - start


def report_metadata(title: str, report: Any, *, duration_s: float, omit: tuple[str, ...] = ()) -> dict[str, Any]:
    """Metadata for one report: a value per field (but ``omit``), ``duration_s`` and a markdown ``summary``."""
    fields = {k: v for k, v in report_fields(report).items() if k not in omit}
    meta: dict[str, Any] = {name: metadata_value(value) for name, value in fields.items()}
    meta |= pass_figures(report, duration_s=duration_s)
    meta["summary"] = MetadataValue.md(summary_md(title, fields, duration_s))
    return meta


def pass_figures(report: Any, *, duration_s: float) -> dict[str, Any]:
    """The five keys every pass reports alike (:func:`~engram_pipeline.pass_metrics.pass_metrics` of
    ``report``), as metadata; inside a run whose process has ``ENGRAM_METRICS_DIR`` set, also written there as
    the textfile of this asset and partition (:func:`~engram_pipeline.pass_metrics.write_textfile`), with what
    the run found in the store (:func:`~engram_pipeline.pass_metrics.store_gauges`)."""
    metrics = pass_metrics(report, duration_s=round(duration_s, 3))
    try:
        context = AssetExecutionContext.get()
    except DagsterInvariantViolationError:  # called outside an asset's execution (a test, a script)
        context = None
    engram = getattr(context.resources, "engram", None) if context is not None else None
    directory = engram.settings().metrics_dir if engram is not None else ""
    if context is not None and directory:
        partition = context.partition_key if context.has_partition_key else ""
        name = context.asset_key.to_user_string()
        gauges = store_gauges(report)
        write_textfile(directory, name, partition, metrics, finished_at=time.time(), gauges=gauges)
    return {name: metadata_value(value) for name, value in metrics.as_dict().items()}


def metadata_value(value: Any) -> Any:
    if isinstance(value, bool):
        return MetadataValue.bool(value)
    if isinstance(value, int):
        return MetadataValue.int(value)
    if isinstance(value, float):
        return MetadataValue.float(round_float(value))
    if value is None or isinstance(value, str):
        return MetadataValue.text("" if value is None else value)
    return MetadataValue.json(_jsonable(value))


def round_float(value: float) -> float:
    """A float as a reviewer reads it: 4 significant digits (0.1136, not 0.11363636363636363)."""
    return float(f"{value:.4g}")


def summary_md(title: str, fields: Mapping[str, Any], duration_s: float) -> str:
    """``title`` and a two-column table of the scalar fields; nested values are in their own entries."""
    lines = [f"**{title}** ({duration_s:.2f} s)", "", "| | |", "|---|---|"]
    for name, value in fields.items():
        if isinstance(value, bool | int | float | str) or value is None:
            shown = f"{value:.3f}" if isinstance(value, float) else value
            lines.append(f"| {name} | {md_cell(shown)} |")
    return "\n".join(lines)


def md_cell(value: Any) -> str:
    """A value as one markdown table cell (pipes escaped, one line)."""
    return " ".join(str(value).replace("|", "\\|").split())


def _jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, long lists cut, and anything else JSON cannot hold as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = report_fields(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        cut = [_jsonable(v) for v in items[:MAX_LISTED]]
        return cut + [f"... {len(items) - MAX_LISTED} more"] if len(items) > MAX_LISTED else cut
    if isinstance(value, float):
        return round_float(value)
    return json.loads(json.dumps(value, default=json_value))


# The typed table is what a reviewer reads on the asset page, in a pane about 670 px wide on a 1600 px screen,
# so the content column must get the room: besides the content, only short columns and the plan id (what the
# apply config names), which breaks at its hyphens. The judge's reasons and the memory ids are in the Markdown
# view (``review``); an apply's table shows each row's outcome instead of the similarity reviewed before.
REVIEW_COLUMNS = {
    c.name: c
    for c in (
        TableColumn("cluster", "int", description="the number to reject it by (apply config: reject)"),
        TableColumn("role", "string", description="canonical (kept) or member (to be superseded by it)"),
        TableColumn("content", "string"),
        TableColumn("similarity", "float", description="cosine to the canonical (the judge's reason: see review)"),
        TableColumn("outcome", "string", description="merged, rejected, skipped_concurrent_edit, ..."),
        TableColumn("plan_id", "string", description="the plan to apply (apply config: plan_id)"),
    )
}
PLAN_TABLE = ("cluster", "role", "content", "similarity", "plan_id")
APPLY_TABLE = ("cluster", "role", "content", "outcome", "plan_id")


def merge_review(report: Any) -> dict[str, Any]:
    """The corpus-merge plan as a reviewer reads it: per numbered cluster the canonical's content, each
    member's content and similarity; as a markdown table (``review``, with memory ids) and a typed table
    (``review_table``, with the plan id)."""
    rows = review_rows(report.per_cluster, plan_id=report.plan_id or "")
    rejected = f", clusters {', '.join(map(str, report.rejected))} rejected" if report.rejected else ""
    heading = (
        f"**Plan `{report.plan_id}`**: {report.clusters} clusters, {report.merged} members "
        f"{'to merge (dry run)' if report.dry_run else 'merged'}, "
        f"{report.skipped_concurrent_edit} skipped (changed since the review){rejected}"
    )
    lines = [heading, "", "| cluster | role | content | similarity | reason | outcome | memory id |"]
    lines.append("|---:|---|---|---:|---|---|---|")
    for r in rows:
        role = "**canonical**" if r["role"] == "canonical" else "member"
        sim = "" if r["similarity"] is None else f"{r['similarity']:.3f}"
        cells = [r["cluster"], role, md_cell(r["content"]), sim, md_cell(r["reason"]), r["outcome"], r["memory_id"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if not rows:
        lines.append("| | | *nothing to merge* | | | | |")
    return {
        "plan_id": MetadataValue.text(report.plan_id or ""),
        "review": MetadataValue.md("\n".join(lines)),
        "review_table": review_table(rows, PLAN_TABLE if report.dry_run else APPLY_TABLE),
    }


def review_table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> Any:
    schema = TableSchema(columns=[REVIEW_COLUMNS[c] for c in columns])
    return MetadataValue.table([TableRecord({c: r[c] for c in columns}) for r in rows], schema=schema)


def review_rows(per_cluster: Any, *, plan_id: str = "") -> list[dict[str, Any]]:
    """One row for each canonical and each member, cluster by cluster (numbered as in the plan)."""
    rows: list[dict[str, Any]] = []
    for cluster in per_cluster:
        n = int(cluster["cluster"])
        rows.append(
            {
                "cluster": n,
                "role": "canonical",
                "content": cluster["canonical"],
                "similarity": None,
                "reason": "",
                "outcome": cluster.get("outcome", ""),
                "plan_id": plan_id,
                "memory_id": cluster["canonical_id"],
            }
        )
        for m in cluster["members"]:
            rows.append(
                {
                    "cluster": n,
                    "role": "member",
                    "content": m["content"],
                    "similarity": round_float(float(m["similarity"])),
                    "reason": str(m.get("reason") or ""),
                    "outcome": m.get("outcome", ""),
                    "plan_id": plan_id,
                    "memory_id": m["id"],
                }
            )
    return rows
