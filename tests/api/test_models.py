"""The request models are derived from the records of ``model.py``: the same fields, defaults and notes."""

from __future__ import annotations

from engram_pipeline.api.models import RememberRequest, UpdateRequest
from engram_pipeline.model import NEW_MEMORY_DEFAULTS, MemoryChanges, NewMemory, record_fields


def test_remember_request_is_the_new_memory_record() -> None:
    fields = RememberRequest.model_fields
    assert list(fields) == ["agent_id", "content", *NewMemory.__annotations__, "vector"]
    for name, (_, note) in record_fields(NewMemory).items():
        default = NEW_MEMORY_DEFAULTS[name]  # type: ignore[literal-required]
        assert fields[name].default == (list(default) if isinstance(default, tuple) else default), name
        assert fields[name].description == note, name
    body = RememberRequest.model_validate({"agent_id": "a", "content": "c"}).model_dump(exclude={"vector"})
    assert body == {"agent_id": "a", "content": "c", **NEW_MEMORY_DEFAULTS, "tags": []}


def test_update_request_is_the_changes_record() -> None:
    fields = UpdateRequest.model_fields
    assert list(fields) == [*MemoryChanges.__annotations__, "expected_version"]
    for name, (_, note) in record_fields(MemoryChanges).items():
        assert fields[name].default is None and fields[name].description == note, name
