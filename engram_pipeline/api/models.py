"""Request and response models of the memory API, one set per resource.

Request models forbid unknown fields (a typo is a 422 that names the field, never a silently ignored option)
and are strict (``"5"`` is not a number). Limits that depend on settings (content bytes, vector dimension)
are checked by the store, which raises ``InvalidInput`` before anything is written.

``MemoryOut`` is derived from ``model.MemoryRecord`` (the columns a client sees, with their types),
``RememberRequest`` from ``model.NewMemory`` (the options of a new memory, with their defaults),
``UpdateRequest`` from ``model.MemoryChanges`` and ``PlanOut`` from ``model.PLAN_SCHEMA``: none lists a field
of the record it serves; a field's description is the record's note on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, get_type_hints

import pyarrow as pa
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, create_model, model_validator

from engram_pipeline.model import (
    JSON_COLUMNS,
    NEW_MEMORY_DEFAULTS,
    PLAN_SCHEMA,
    SERVED_COLUMNS,
    Memory,
    MemoryChanges,
    MemoryRecord,
    NewMemory,
    PlanStatus,
    record_fields,
)
from engram_pipeline.store.results import RememberOutcome

# The limits are the store's (one place: engram_pipeline.store.validation); the models repeat them only so that
# the OpenAPI schema shows them. What the models let through, the store still checks before writing.
from engram_pipeline.store.validation import (
    ID_PATTERN,
    MAX_ID_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_TTL_S,
    MAX_VERSION,
    check_plain_string,
)


def _storable(value: str) -> str:
    return check_plain_string("text", value)


Id = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN), AfterValidator(_storable)
]
Text = Annotated[str, StringConstraints(min_length=1), AfterValidator(_storable)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TAG_CHARS), AfterValidator(_storable)]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Vector = Annotated[list[Annotated[float, Field(allow_inf_nan=False)]], Field(min_length=1, max_length=8192)]
ConfidenceTier = Literal["hot", "warm", "cold", "archive"]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# -- memories --------------------------------------------------------------------------------------------
# The API's types of the fields whose values it constrains (the limits are the store's, above); every other
# field has the record's type.
_CONSTRAINED: dict[str, Any] = {
    "content": Text,
    "tags": Tags,
    "importance": Unit,
    "confidence": Unit,
    "ttl_s": Annotated[int, Field(ge=1, le=MAX_TTL_S)],
}


def _record_fields(record: type, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One request field per key of a record of ``model`` (``NewMemory``, ``MemoryChanges``), with the record's
    type (or the constrained one above), described by the record's note on it. With ``defaults`` (the record's),
    a field defaults to its default; without, every field is optional and null means "not given"."""
    out: dict[str, Any] = {}
    for name, (hint, note) in record_fields(record).items():
        kind = _CONSTRAINED.get(name, hint)
        if defaults is None:
            out[name] = (kind | None, Field(default=None, description=note))
        else:
            default = defaults[name]
            kind = kind | None if default is None else kind
            default = list(default) if isinstance(default, tuple) else default
            out[name] = (kind, Field(default=default, description=note))
    return out


# The new memory's options, derived from ``model.NewMemory`` (so the store, the API, MCP and the CLI cannot drift).
_NewMemory = create_model(
    "_NewMemory",
    __base__=Request,
    agent_id=(Id, ...),
    content=(Text, Field(description="The memory text (at most ENGRAM_MAX_CONTENT_BYTES bytes of UTF-8).")),
    **_record_fields(NewMemory, NEW_MEMORY_DEFAULTS),
)


class RememberRequest(_NewMemory):  # type: ignore[misc,valid-type]
    """A new memory: its agent, its content, the options of ``model.NewMemory`` and optionally its embedding."""

    vector: Vector | None = Field(default=None, description="A precomputed embedding of the store's dimension.")


# What ``update`` may change, derived from ``model.MemoryChanges``.
_Changes = create_model("_Changes", __base__=Request, **_record_fields(MemoryChanges))


class UpdateRequest(_Changes):  # type: ignore[misc,valid-type]
    """A versioned edit: ``expected_version`` is the version you read; a stale one is refused with 409."""

    expected_version: Annotated[int, Field(ge=1, le=MAX_VERSION)]

    @model_validator(mode="after")
    def _changes_given(self) -> UpdateRequest:
        nulls = sorted(f for f in self.model_fields_set if getattr(self, f) is None and f != "outcome")
        if nulls:
            raise ValueError(f"{', '.join(nulls)} cannot be null (only outcome can be cleared)")
        if not self.model_fields_set - {"expected_version"}:
            raise ValueError("nothing to update: give at least one field besides expected_version")
        return self

    def changes(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.model_fields_set if f != "expected_version"}


class RestoreRequest(Request):
    """Optional: the version you read. Needed when the memory changed after the event that hid it (restoring
    then reverts those changes); a stale one is refused with 409 and ``current_version``."""

    expected_version: Annotated[int, Field(ge=1, le=MAX_VERSION)] | None = None


class DeletedOut(BaseModel):
    """A deleted memory: its pre-image is in the audit, and ``POST /v1/memories/{id}/restore`` brings it back."""

    id: str
    agent_id: str
    version: int = Field(description="the version that was deleted")
    deleted: bool = True


class RecallRequest(Request):
    agent_id: Id
    query: Text | None = None
    vector: Vector | None = None
    k: Annotated[int, Field(ge=1, le=100)] = 10
    include_superseded: bool = False
    include_archived: bool = False
    tiers: Annotated[list[ConfidenceTier], Field(min_length=1)] | None = None
    min_confidence: Unit | None = None
    evidence: Annotated[
        int, Field(ge=0, le=10, description="sources attached to each derived hit (archived; visible: one)")
    ] = 3

    @model_validator(mode="after")
    def _one_probe(self) -> RecallRequest:
        if (self.query is None) == (self.vector is None):
            raise ValueError("give exactly one of query or vector")
        return self


def _served_fields() -> dict[str, Any]:
    """One response field per column a client sees (``model.SERVED_COLUMNS``), typed as ``model.MemoryRecord``
    types it; the JSON columns (``model.JSON_COLUMNS``) are served decoded, as objects."""
    hints = get_type_hints(MemoryRecord)
    decoded = {"metadata": dict[str, Any], "importance_factors": dict[str, Any] | None}
    if set(decoded) != set(JSON_COLUMNS):
        raise TypeError(f"JSON columns {sorted(JSON_COLUMNS)} need a decoded response type each")
    return {name: (decoded.get(name, hints[name]), ...) for name in SERVED_COLUMNS}


# Derived from the record (so the record, the schema and the API cannot drift).
_ServedMemory = create_model("_ServedMemory", **_served_fields())


class MemoryOut(_ServedMemory):  # type: ignore[misc,valid-type]
    """A memory as clients see it (every column but the vector and the internal write token)."""

    @classmethod
    def of(cls, row: Memory) -> MemoryOut:
        data = {k: row.get(k) for k in cls.model_fields}
        data["tags"] = data["tags"] or []
        data["contradiction_with"] = data["contradiction_with"] or []
        data["metadata"] = _json_object(row.get("metadata")) or {}
        data["importance_factors"] = _json_object(row.get("importance_factors"))
        return cls.model_validate(data)


def _json_object(raw: str | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"raw": raw}
    return value if isinstance(value, dict) else {"value": value}


class RememberResponse(BaseModel):
    memory: MemoryOut
    outcome: RememberOutcome
    score: float | None = Field(description="similarity to the matched row of a semantic duplicate")
    contradictions: list[dict[str, Any]]


class RecallHitOut(BaseModel):
    memory: MemoryOut
    score: float
    similarity: float
    recency: float
    evidence: list[MemoryOut] = Field(
        default_factory=list, description="for a derived hit: sources no hit above returned (archived; visible: one)"
    )


class RecallResponse(BaseModel):
    data: list[RecallHitOut]
    count: int


# -- agents and passes -----------------------------------------------------------------------------------
class DecayRequest(Request):
    confidence: bool = Field(default=False, description="also run competition-aware confidence decay")


class ConsolidateRequest(Request):
    scope: Literal["recent", "full"] = "recent"


class PromoteRequest(Request):
    """No options yet; present so that unknown fields are refused like everywhere else."""


class CorpusMergeRequest(Request):
    """A dry run (the default) stores a plan and returns its ``plan_id`` and numbered clusters for review;
    ``dry_run: false`` with that ``plan_id`` applies exactly the reviewed plan (never a fresh one) but the
    clusters numbered in ``reject``."""

    dry_run: bool = Field(
        default=True, description="plan only (default); false applies exactly the reviewed plan named by plan_id"
    )
    plan_id: Id | None = Field(default=None, description="the reviewed plan to apply (with dry_run: false)")
    reject: list[Annotated[int, Field(ge=1)]] = Field(
        default=[],
        max_length=10_000,
        description="numbers of the plan's clusters not to merge (per_cluster[].cluster); recorded, and not "
        "proposed again while their memories keep their content",
    )

    @model_validator(mode="after")
    def _apply_names_its_plan(self) -> CorpusMergeRequest:
        if not self.dry_run and self.plan_id is None:
            raise ValueError("applying needs the plan_id of the reviewed plan (a dry run stores one and returns it)")
        if self.dry_run and (self.plan_id is not None or self.reject):
            raise ValueError("plan_id and reject are only used to apply: send dry_run: false with them")
        return self


# -- corpus-merge plans ----------------------------------------------------------------------------------
def _plan_field(column: pa.Field) -> tuple[Any, Any]:
    """A plan column as a response field: ``body`` and ``result`` are the JSON the store decodes, ``status`` a
    PlanStatus; the rest by Arrow type (a column of another type fails here, at import, not in a response)."""
    if column.name == "body":
        return dict[str, Any], ...
    if column.name == "result":
        return dict[str, Any] | None, None
    if column.name == "status":
        return PlanStatus, ...
    python = str if pa.types.is_string(column.type) else datetime if pa.types.is_timestamp(column.type) else None
    if python is None:
        raise TypeError(f"plans column {column.name}: no response type for {column.type}")
    return python | None, None


# One field per column of ``model.PLAN_SCHEMA`` (derived, so the two cannot drift).
PlanOut = create_model(
    "PlanOut",
    __doc__="A corpus-merge plan: ``body`` holds its numbered clusters (canonical, members, their versions and "
    "similarities), ``result`` what applying, discarding or expiring it recorded.",
    **{column.name: _plan_field(column) for column in PLAN_SCHEMA},  # type: ignore[call-overload]
)
PlanList = create_model("PlanList", data=(list[PlanOut], ...), count=(int, ...))  # type: ignore[valid-type]


class ReportResponse(BaseModel):
    """A lifecycle pass's report (its frozen dataclass, as JSON)."""

    pass_name: str
    agent_id: str
    report: dict[str, Any]


# -- errors ----------------------------------------------------------------------------------------------
class ErrorOut(BaseModel):
    detail: str
    current_version: int | None = None
    errors: list[dict[str, Any]] | None = None
