"""The typed memory record and the Arrow schema are one record, and the column lists are derived from them."""

from __future__ import annotations

import inspect
from typing import get_args, get_type_hints

import pytest

from engram_pipeline.importer import EXPORT_COLUMNS, STORE_FIELDS
from engram_pipeline.model import (
    INTERNAL_COLUMNS,
    KINDS,
    MEMORY_COLUMNS,
    NEW_MEMORY_DEFAULTS,
    PLAN_SCHEMA,
    SERVED_COLUMNS,
    STATUSES,
    ImportedMemory,
    MemoryChanges,
    MemoryRecord,
    NewMemory,
    PlacedMemory,
    PlanRecord,
    Status,
    memory_schema,
    record_fields,
)
from engram_pipeline.settings import Settings
from engram_pipeline.store import InvalidInput, MemoryStore
from engram_pipeline.store.rows import INPUT_FIELDS, build_row
from engram_pipeline.store.validation import check_choice


def test_the_record_has_the_schemas_columns_in_order() -> None:
    assert tuple(memory_schema(8).names) == MEMORY_COLUMNS
    nullable = {f.name for f in memory_schema(8) if not f.nullable}
    hints = get_type_hints(MemoryRecord)
    # A column the schema holds not-null is not optional in the record.
    assert all(type(None) not in get_args(hints[c]) for c in nullable)


def test_a_new_row_is_a_whole_record_but_its_vector() -> None:
    row = build_row(Settings().replace(embedder="hashing"), "alice", "User prefers tea")
    assert tuple(row) == tuple(c for c in MEMORY_COLUMNS if c != "vector")


def test_the_importer_fields_partition_the_served_columns() -> None:
    params = set(inspect.signature(build_row).parameters) - {"settings", "memory_id"}
    assert params | {"id"} == INPUT_FIELDS
    assert set(EXPORT_COLUMNS) == set(SERVED_COLUMNS) - {"content_hash"}
    assert STORE_FIELDS | (INPUT_FIELDS - {"ttl_s"}) == set(EXPORT_COLUMNS)
    assert not set(INTERNAL_COLUMNS) & set(EXPORT_COLUMNS)


def _keywords(fn: object) -> dict[str, object]:
    params = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
    return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}


def test_the_new_memory_records_are_the_keywords_of_build_row_and_remember() -> None:
    """``build_row`` takes ``ImportedMemory``, ``remember`` ``PlacedMemory`` (beside the vector and the actor),
    both with ``NEW_MEMORY_DEFAULTS`` for the options every surface has (``NewMemory``)."""
    assert list(NEW_MEMORY_DEFAULTS) == list(NewMemory.__annotations__)
    built = _keywords(build_row)
    assert set(built) == set(get_type_hints(ImportedMemory))
    remember = _keywords(MemoryStore.remember)
    assert set(remember) == {*get_type_hints(PlacedMemory), "vector", "actor"}
    for name, default in NEW_MEMORY_DEFAULTS.items():
        assert built[name] == default and remember[name] == default, name
    assert set(get_type_hints(PlacedMemory)) - set(get_type_hints(NewMemory)) == {"memory_id", "created_at"}


def test_every_field_a_shell_derives_has_a_note() -> None:
    """The notes are the API's descriptions, the MCP arguments' and the CLI's help: none may be missing."""
    for record in (PlacedMemory, MemoryChanges):
        assert all(note for _, note in record_fields(record).values()), record.__name__


def test_a_plan_record_is_a_plan_row_and_the_store_hands_out_exactly_it(store: MemoryStore) -> None:
    assert list(PlanRecord.__annotations__) == PLAN_SCHEMA.names
    plan_id = store.engine.save_plan("a", {"clusters": []})
    plan = store.engine.get_plan(plan_id)
    assert plan is not None and list(plan) == PLAN_SCHEMA.names
    decoded = (plan["status"], plan["body"], plan["result"], plan["applied_at"])
    assert decoded == ("pending", {"clusters": []}, None, None)


def test_statuses_are_the_literal() -> None:
    assert get_args(Status) == STATUSES


def test_check_choice_returns_the_choice_or_refuses() -> None:
    assert check_choice("kind", "semantic", KINDS) == "semantic"
    with pytest.raises(InvalidInput, match="kind must be one of episodic, semantic"):
        check_choice("kind", "other", KINDS)
