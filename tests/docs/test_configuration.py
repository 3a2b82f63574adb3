"""docs/configuration.md carries the table of every environment variable that settings.py generates."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engram_pipeline.settings import Settings, SettingsError, env_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_table_is_generated_into_the_doc() -> None:
    # tests/docs/test_generated_tables.py checks its content, as for every generated block
    assert "<!-- generated: engram_pipeline.settings.env_table() -->" in DOC.read_text(encoding="utf-8")


def test_every_variable_is_in_the_table() -> None:
    names = [f.metadata["env"] for f in dataclasses.fields(Settings) if "env" in f.metadata]
    table = env_table()
    assert len(names) == len(set(names)) and all(f"| `{n}` |" in table for n in names)


def test_the_schedule_intervals_have_distinct_names_and_read_the_inherited_ones() -> None:
    assert Settings.from_env({"STM_CONSOLIDATION_INTERVAL_MS": "0"}).stm_interval_ms == 0
    assert Settings.from_env({"ENGRAM_PROMOTION_INTERVAL_MS": "60000"}).stm_interval_ms == 60_000
    assert Settings.from_env({"MEMORY_CONSOLIDATION_INTERVAL_MS": "7200000"}).merge_interval_ms == 7_200_000
    assert Settings.from_env({"ENGRAM_CORPUS_MERGE_INTERVAL_MS": "7200000"}).merge_interval_ms == 7_200_000
    both = {"ENGRAM_PROMOTION_INTERVAL_MS": "1000", "STM_CONSOLIDATION_INTERVAL_MS": "2000"}
    with pytest.raises(SettingsError, match="disagree: set only ENGRAM_PROMOTION_INTERVAL_MS"):
        Settings.from_env(both)
