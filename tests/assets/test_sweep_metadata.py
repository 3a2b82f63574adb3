"""A shard run's metadata stays readable however many agents the shard holds: totals of every count, and a
per-agent table capped in rows (the busiest agents) and columns (what the passes did before what they read)."""

from __future__ import annotations

from dataclasses import dataclass, make_dataclass
from datetime import UTC, datetime

import pytest

from assets._report import MAX_AGENT_COLUMNS, MAX_AGENT_ROWS, sweep_metadata
from engram_pipeline import pass_metrics
from engram_pipeline.lifecycle.sweep import SweepReport


@dataclass(frozen=True)
class Decay:
    processed: int
    pruned: int
    score: float


@dataclass(frozen=True)
class Nested:
    decay: Decay
    flagged: int


@pytest.fixture(autouse=True)
def counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """These made-up reports say what they count, as every pass's report does (pass_metrics.COUNTS)."""
    monkeypatch.setitem(pass_metrics.COUNTS, Decay, (("processed",), ("pruned",), ()))
    monkeypatch.setitem(pass_metrics.COUNTS, Nested, ((), ("flagged",), ()))


def test_totals_count_every_agent_and_the_table_shows_the_busiest() -> None:
    agents = {f"agent-{n:03d}": Decay(processed=100, pruned=n % 7, score=0.5) for n in range(120)}
    meta = sweep_metadata("Decay", SweepReport("ltm_decay", datetime(2026, 3, 1, tzinfo=UTC), agents), duration_s=1.0)
    assert meta["agents"].value == 120
    assert meta["processed"].value == 12_000 and meta["pruned"].value == sum(n % 7 for n in range(120))
    assert "score" not in meta  # a float is shown per agent, never summed
    assert (meta["rows_scanned"].value, meta["rows_acted_on"].value) == (12_000, meta["pruned"].value)
    rows = [line for line in meta["agents_table"].value.splitlines() if line.startswith("| agent-")]
    assert len(rows) == MAX_AGENT_ROWS
    assert all(line.split(" | ")[2] == "6" for line in rows[:17])  # the agents that pruned most come first
    assert f"the {MAX_AGENT_ROWS} busiest of 120 agents" in meta["agents_table"].value


def test_nested_reports_are_flattened_and_wide_tables_cut_read_counts_first(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = make_dataclass("Wide", [(f"changed_{i}", int) for i in range(MAX_AGENT_COLUMNS)] + [("processed", int)])
    monkeypatch.setitem(pass_metrics.COUNTS, wide, (("processed",), (), ()))
    report = SweepReport(
        "pipeline",
        datetime(2026, 3, 1, tzinfo=UTC),
        {"a": wide(*range(1, MAX_AGENT_COLUMNS + 2)), "b": wide(*range(1, MAX_AGENT_COLUMNS + 2))},
    )
    table = sweep_metadata("Wide", report, duration_s=0.1)["agents_table"].value
    header = table.splitlines()[0]
    assert "processed" not in header and "changed_0" in header
    assert "Not in this table (the counts are summed above): processed." in table

    nested = SweepReport("pipeline", datetime(2026, 3, 1, tzinfo=UTC), {"a": Nested(Decay(5, 1, 0.25), flagged=2)})
    meta = sweep_metadata("Pipeline", nested, duration_s=0.1)
    assert (meta["decay.processed"].value, meta["decay.pruned"].value, meta["flagged"].value) == (5, 1, 2)
    assert "| a | 5 | 1 | 0.25 | 2 |" in meta["agents_table"].value


def test_an_empty_shard_says_so() -> None:
    meta = sweep_metadata("Decay", SweepReport("ltm_decay", datetime(2026, 3, 1, tzinfo=UTC), {}), duration_s=0.0)
    assert meta["agents"].value == 0 and "no agents in this shard" in meta["agents_table"].value
