"""The memory record: statuses, kinds, and the Arrow schemas every table is created from.

The Arrow schema returned by :func:`memory_schema` is the single source of truth for a memory's columns, and
:class:`MemoryRecord` is the same record as a type (``tests/lib/test_model.py`` holds the two together). The
column lists elsewhere (:data:`MEMORY_COLUMNS`, :data:`SERVED_COLUMNS`, the importer's fields, the API model)
are derived from them. Records travel through the library as plain dicts keyed by those column names
(``Memory``: a whole record or a selection of its columns). :func:`row_to_json` / :func:`row_from_json` turn a
row into the audit pre-image and back, losslessly.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NotRequired, TypedDict, get_args, get_type_hints

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SCHEMA_VERSION = 1

Tier = Literal["stm", "ltm"]
Kind = Literal["episodic", "semantic", "procedural", "schema"]
Source = Literal["user", "agent", "tool", "derived", "inferred"]
Outcome = Literal["success", "failure"]
Status = Literal["active", "stale", "contradicted", "superseded", "archived"]
PlanStatus = Literal["pending", "applied", "discarded", "expired"]
LinkRel = Literal["duplicate-of", "contradicts", "derived-from", "supersedes"]

TIERS: tuple[Tier, ...] = get_args(Tier)
KINDS: tuple[Kind, ...] = get_args(Kind)
SOURCES: tuple[Source, ...] = get_args(Source)
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
STATUSES: tuple[Status, ...] = get_args(Status)
LINK_RELS: tuple[LinkRel, ...] = get_args(LinkRel)

# What a row whose ``confidence`` is null is taken to have, everywhere a confidence is read; see
# :func:`confidence_of` (a row) and :func:`confidences` (a column). A real 0.0 stays 0.0.
DEFAULT_CONFIDENCE = 0.5
# Initial confidence by provenance (issue 4); anything else starts at DEFAULT_CONFIDENCE.
SOURCE_CONFIDENCE = {"user": 0.9, "tool": 0.8, "agent": 0.72, "derived": 0.5, "inferred": 0.4}

TS = pa.timestamp("us", tz="UTC")

Memory = dict[str, Any]


class MemoryRecord(TypedDict):
    """One row of ``memories`` as a read returns it; the keys are :func:`memory_schema`'s columns, in order."""

    id: str
    agent_id: str
    tier: Tier
    kind: Kind
    content: str
    content_hash: str
    vector: NotRequired[list[float] | None]  # absent in a new row until it is embedded
    tags: list[str]
    source: Source | None
    outcome: Outcome | None
    importance: float | None
    importance_factors: str | None  # JSON
    confidence: float | None
    access_count: int | None
    reinforcement_count: int | None
    pinned: bool | None
    status: Status
    superseded_by: str | None
    contradiction_with: list[str]
    created_at: datetime | None
    updated_at: datetime | None
    last_accessed_at: datetime | None
    decayed_at: datetime | None
    expires_at: datetime | None
    version: int
    write_token: str | None  # the compare-and-set batch that last wrote the row
    metadata: str | None  # JSON


class NewMemory(TypedDict, total=False):
    """The options of a new memory beside its agent and content: what ``remember`` takes on every surface. The
    HTTP API's ``RememberRequest`` and the MCP ``remember`` tool derive their fields from this record, with
    :data:`NEW_MEMORY_DEFAULTS` as their defaults and a field's note (the ``Annotated`` text) as its description;
    ``engram remember`` has one option per field (a test holds them together), the note as its help."""

    tier: Annotated[Tier | Literal["auto"], "stm, ltm or auto: time-bound content (or a ttl_s) goes to stm"]
    kind: Annotated[Kind, "semantic: a fact; episodic: an event; procedural: how to; schema: a pattern"]
    tags: Annotated[Sequence[str], "labels to find it by"]
    source: Annotated[Source, "who said it (sets the default confidence)"]
    outcome: Annotated[Outcome | None, "how an episode ended"]
    pinned: Annotated[bool, "never pruned by decay"]
    importance: Annotated[float | None, "0 to 1 (default 0.5; the passes re-score it)"]
    confidence: Annotated[float | None, "0 to 1 (default: by source)"]
    metadata: Annotated[dict[str, Any] | None, "any JSON object kept with the memory"]
    ttl_s: Annotated[int | None, "seconds a short-term memory lives (default STM_DEFAULT_TTL_S)"]


# What each option of a new memory is when not given (``build_row`` and ``MemoryStore.remember`` have the same
# defaults: tests/lib/test_model.py holds them together).
NEW_MEMORY_DEFAULTS: NewMemory = {
    "tier": "auto",
    "kind": "semantic",
    "tags": (),
    "source": "agent",
    "outcome": None,
    "pinned": False,
    "importance": None,
    "confidence": None,
    "metadata": None,
    "ttl_s": None,
}


class PlacedMemory(NewMemory, total=False):
    """A new memory whose id and creation time the caller chooses: the keywords of the library's ``remember`` and
    ``remember_async`` (beside ``vector`` and ``actor``). The HTTP API and MCP leave them to the store."""

    memory_id: Annotated[str | None, "the id (default: generated)"]
    created_at: Annotated[datetime | None, "when it was said (default: now)"]


class ImportedMemory(PlacedMemory, total=False):
    """A new memory with its access history, as an export carries it: the keywords of ``build_row``, and the
    fields an import line may give beside the agent and the content (``store.rows.INPUT_FIELDS``)."""

    last_accessed_at: datetime | None
    access_count: int


class MemoryChanges(TypedDict, total=False):
    """What ``update`` may change; the other columns belong to the store or to passes. The HTTP API's
    ``UpdateRequest`` and the MCP ``update_memory`` tool derive their fields from this record, a field's note as
    its description; ``engram update`` has one option per field (a test holds them together), the note as its
    help."""

    content: Annotated[str, "the new text"]
    tags: Annotated[Sequence[str], "replaces the tags"]
    importance: Annotated[float, "0 to 1"]
    confidence: Annotated[float, "0 to 1"]
    pinned: Annotated[bool, "never pruned by decay"]
    kind: Annotated[Kind, "semantic: a fact; episodic: an event; procedural: how to; schema: a pattern"]
    tier: Annotated[Tier, "stm or ltm"]
    outcome: Annotated[Outcome | None, "how an episode ended; null clears the outcome"]
    metadata: Annotated[dict[str, Any], "replaces the whole metadata object"]
    source: Annotated[Source, "who said it (sets the default confidence)"]


def record_fields(record: type) -> dict[str, tuple[Any, str | None]]:
    """Each key of a record (a TypedDict above) with its type, without the note, and its note: what the shells
    derive their request fields, tool arguments and options from.

    >>> record_fields(MemoryChanges)["tier"]
    (typing.Literal['stm', 'ltm'], 'stm or ltm')
    """
    out: dict[str, tuple[Any, str | None]] = {}
    for name, hint in get_type_hints(record, include_extras=True).items():
        notes = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, str)]
        out[name] = (get_args(hint)[0] if notes else hint, notes[0] if notes else None)
    return out


MEMORY_COLUMNS: tuple[str, ...] = tuple(MemoryRecord.__annotations__)
# Columns only the store reads: the embedding (clients send and receive it separately) and the CAS token.
INTERNAL_COLUMNS = ("vector", "write_token")
# What a client sees of a memory.
SERVED_COLUMNS: tuple[str, ...] = tuple(c for c in MEMORY_COLUMNS if c not in INTERNAL_COLUMNS)
# Columns holding JSON text that shells decode into objects.
JSON_COLUMNS = ("importance_factors", "metadata")


def memory_schema(dim: int) -> pa.Schema:
    """Columns of the ``memories`` table for vectors of ``dim`` float32 components."""
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("agent_id", pa.string(), nullable=False),
            pa.field("tier", pa.string(), nullable=False),
            pa.field("kind", pa.string(), nullable=False),
            pa.field("content", pa.string(), nullable=False),
            pa.field("content_hash", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim)),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("source", pa.string()),
            pa.field("outcome", pa.string()),
            pa.field("importance", pa.float64()),
            # JSON: the factors and reasons of the last importance score (written whole by each re-score, so
            # a 1M-row decay pass never parses and re-serialises every row's metadata).
            pa.field("importance_factors", pa.string()),
            pa.field("confidence", pa.float64()),
            pa.field("access_count", pa.int64()),
            pa.field("reinforcement_count", pa.int64()),
            pa.field("pinned", pa.bool_()),
            pa.field("status", pa.string(), nullable=False),
            pa.field("superseded_by", pa.string()),
            pa.field("contradiction_with", pa.list_(pa.string())),
            pa.field("created_at", TS),
            pa.field("updated_at", TS),
            pa.field("last_accessed_at", TS),
            pa.field("decayed_at", TS),
            pa.field("expires_at", TS),
            pa.field("version", pa.int64(), nullable=False),
            # Token of the batch that last wrote the row: lets a compare-and-set learn exactly which of its
            # rows it applied by reading its own commit's table version.
            pa.field("write_token", pa.string()),
            pa.field("metadata", pa.string()),
        ]
    )


LINK_SCHEMA = pa.schema(
    [
        pa.field("agent_id", pa.string()),
        pa.field("src_id", pa.string()),
        pa.field("dst_id", pa.string()),
        pa.field("rel", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("created_at", TS),
        pa.field("run_id", pa.string()),
    ]
)

AUDIT_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string()),
        pa.field("memory_id", pa.string()),
        pa.field("agent_id", pa.string()),
        pa.field("action", pa.string()),
        pa.field("actor", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("at", TS),
        pa.field("before", pa.string()),  # full pre-image (row_to_json), null for a create
        pa.field("after", pa.string()),  # post-image or a summary, null for a delete
    ]
)

PLAN_SCHEMA = pa.schema(
    [
        pa.field("plan_id", pa.string()),
        pa.field("agent_id", pa.string()),
        pa.field("kind", pa.string()),  # "corpus_merge"
        pa.field("status", pa.string()),  # a PlanStatus
        pa.field("created_at", TS),
        pa.field("applied_at", TS),
        pa.field("run_id", pa.string()),
        pa.field("body", pa.string()),  # JSON: clusters with canonical, members, scores, member versions
        pa.field("result", pa.string()),  # JSON: the apply's report, or who discarded it / which plan expired it
    ]
)


class PlanRecord(TypedDict):
    """A plan as the store hands it out: a row of :data:`PLAN_SCHEMA` with ``body`` and ``result`` decoded from
    their JSON (``store/plans.py``). A corpus-merge body holds ``clusters`` (each a canonical, its members with
    the versions the plan read and their scores); ``result`` is the apply's report, or who discarded the plan or
    which plan expired it."""

    plan_id: str
    agent_id: str
    kind: str
    status: PlanStatus
    created_at: datetime
    applied_at: datetime | None
    run_id: str | None
    body: dict[str, Any]
    result: dict[str, Any] | None


CURSOR_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string()),  # "<pass>/<agent_id>"
        pa.field("pass_name", pa.string()),
        pa.field("agent_id", pa.string()),
        pa.field("cursor", pa.string()),  # JSON
        pa.field("updated_at", TS),
    ]
)

META_SCHEMA = pa.schema([pa.field("key", pa.string()), pa.field("value", pa.string())])

# Reads not yet folded into ``memories`` (see ``engram_pipeline.store.access_log``): one row per memory per
# append, written by recall and get, claimed, folded in and deleted by the passes that read access signals.
ACCESS_LOG_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),  # the memory read
        pa.field("agent_id", pa.string()),
        pa.field("version", pa.int64()),  # the version the reader saw; the fold applies only to that version
        pa.field("times", pa.int64()),  # how many reads this entry stands for
        pa.field("at", TS),  # the last of those reads
        pa.field("claimed_by", pa.string()),  # the fold applying this entry (null: not yet claimed)
        pa.field("claimed_at", TS),
    ]
)


def polars_schema(columns: Sequence[str]) -> dict[str, Any]:
    """The polars dtypes of memory ``columns``, derived from the Arrow schema (never restated by hand)."""
    import polars as pl

    frame = pl.from_arrow(memory_schema(1).empty_table().select(list(columns)))
    assert isinstance(frame, pl.DataFrame)
    return dict(frame.schema)


def utcnow() -> datetime:
    return datetime.now(UTC)


def content_hash(agent_id: str, content: str) -> str:
    """Exact-duplicate key: the agent and its whitespace- and case-normalised content."""
    norm = " ".join(unicodedata.normalize("NFC", content).split()).casefold()
    return hashlib.sha256(f"{agent_id}\x00{norm}".encode()).hexdigest()


def loads_metadata(row: Memory) -> dict[str, Any]:
    raw = row.get("metadata")
    return dict(json.loads(raw)) if raw else {}


def dumps_metadata(meta: dict[str, Any]) -> str:
    return json.dumps(meta, sort_keys=True, default=str)


def rows_to_table(rows: list[Memory], schema: pa.Schema) -> pa.Table:
    """Rows (dicts) to a table in ``schema``'s column order; missing columns become null.

    Built column by column; a fully populated vector column goes through one numpy matrix instead of
    per-float Python objects (it dominated bulk imports).
    """
    arrays = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        if pa.types.is_fixed_size_list(f.type) and values and all(v is not None for v in values):
            flat = np.asarray(values, dtype=np.float32).reshape(-1)
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(flat), f.type.list_size))
        else:
            arrays.append(pa.array(values, type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def row_to_json(row: Memory, schema: pa.Schema) -> str:
    """Serialise a row losslessly (float32 vectors and microsecond times survive the round trip)."""
    out: dict[str, Any] = {}
    for f in schema:
        value = row.get(f.name)
        if isinstance(value, datetime):
            value = value.astimezone(UTC).isoformat()
        elif f.name == "vector" and value is not None:
            value = [float(x) for x in value]
        out[f.name] = value
    return json.dumps(out, sort_keys=True)


def row_from_json(text: str, schema: pa.Schema) -> Memory:
    data = json.loads(text)
    for f in schema:
        if pa.types.is_timestamp(f.type) and data.get(f.name):
            data[f.name] = datetime.fromisoformat(data[f.name])
    # Round-trip through Arrow so the types are exactly those of a row read from the table.
    row: Memory = rows_to_table([data], schema).to_pylist()[0]
    return row


# Tiers by confidence, for health and recall filters, best first: (name, floor, floor included). A confidence
# is in the first tier whose floor it reaches: hot > 0.85, warm 0.70-0.85, cold 0.40-0.70, archive < 0.40.
TIER_FLOORS: tuple[tuple[str, float, bool], ...] = (
    ("hot", 0.85, False),
    ("warm", 0.70, True),
    ("cold", 0.40, True),
    ("archive", 0.0, True),
)


@dataclass(frozen=True)
class TierRange:
    """One tier's confidence interval, derived from ``TIER_FLOORS``."""

    low: float
    low_inclusive: bool
    high: float
    high_inclusive: bool

    def sql(self, column: str = "confidence") -> str:
        """The tier as a SQL predicate on ``column``.

        >>> CONFIDENCE_TIERS["warm"].sql()
        '(confidence >= 0.7 AND confidence <= 0.85)'
        """
        lo, hi = (">=" if self.low_inclusive else ">"), ("<=" if self.high_inclusive else "<")
        return f"({column} {lo} {self.low!r} AND {column} {hi} {self.high!r})"


def _tier_ranges() -> dict[str, TierRange]:
    ranges, high, high_inclusive = {}, 1.0, True
    for name, floor, included in TIER_FLOORS:
        ranges[name] = TierRange(floor, included, high, high_inclusive)
        high, high_inclusive = floor, not included
    return ranges


CONFIDENCE_TIERS: dict[str, TierRange] = _tier_ranges()


def confidence_of(row: Memory) -> float:
    """A row's confidence, :data:`DEFAULT_CONFIDENCE` when it has none.

    >>> confidence_of({"confidence": None}), confidence_of({"confidence": 0.0})
    (0.5, 0.0)
    """
    value = row.get("confidence")
    return DEFAULT_CONFIDENCE if value is None else float(value)


def confidences(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A ``confidence`` column as float64, nulls as :data:`DEFAULT_CONFIDENCE`.

    >>> confidences(pa.array([None, 0.0, 0.9])).tolist()
    [0.5, 0.0, 0.9]
    """
    filled = pc.fill_null(column, DEFAULT_CONFIDENCE)
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.float64)


def confidence_tier(confidence: float) -> str:
    """The tier a confidence falls in.

    >>> [confidence_tier(c) for c in (0.9, 0.85, 0.4, 0.39)]
    ['hot', 'warm', 'cold', 'archive']
    """
    for name, floor, included in TIER_FLOORS:
        if confidence > floor or (included and confidence == floor):
            return name
    return TIER_FLOORS[-1][0]
