"""Bulk JSONL import and export of memories.

One JSON object per line. An import line carries ``agent_id`` and ``content`` and optionally ``id``, ``tier``
(``stm`` | ``ltm`` | ``auto``), ``kind``, ``tags``, ``source``, ``outcome``, ``pinned``, ``created_at``,
``last_accessed_at`` (ISO-8601; a time without a zone is read as UTC), ``access_count``, ``confidence``,
``importance``, ``metadata`` (an object) and ``ttl_s``. Lines written by :func:`export_jsonl` also carry the
fields the store manages (``status``, ``superseded_by``, ``contradiction_with``, ``version``, ...): import keeps
them, so that export then import into a new store (to move it, or to re-embed with another embedder) keeps
hidden rows hidden and versions moving forward. Any other key is refused, so a typo is not silently dropped.

How a bad line is handled: lines are read in batches of ``batch_size``; every line of a batch is validated
before anything of it is written, and a batch is written in one commit. A batch with a bad line is not
written at all, and the import stops there, reporting every bad line of that batch with its line number
(``ImportReport.errors``). Batches before it stay committed whole; since import is idempotent (exact
duplicates are skipped), re-running the fixed file writes only what is missing. ``on_error="skip"`` instead
skips the bad lines only: the valid lines of their batch are written and the import goes on (each skipped
line is in ``errors``); ``dry_run=True`` validates every line and writes nothing.

Each line gets the outcome ``remember`` would give it, line after line: content the agent already has (per
agent, the normalised content hash, within the file and against the store) is an exact duplicate; a line
the merge judge calls the same fact as a visible row of its agent (stored, or an earlier line) folds into
that row (a semantic duplicate); the contradiction rules flag (or, under policy ``supersede``, hide) the
rows a new line contradicts. The checks run in bulk per batch
(:mod:`engram_pipeline.store.write.bulk`: one neighbour query per agent, one matrix product within the
batch). Lines that carry store-managed fields (an export's) are restored as they were, without these checks:
the store they came from already made its decisions. ``checks="exact"`` skips the semantic and
contradiction checks (exact dedup only): for a corpus loaded so that the batch passes find its near-duplicates
and contradictions, as the bundled sample corpus is. ``dry_run`` validates and checks exact duplicates only
(the semantic checks need the embeddings).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from engram_pipeline.judge import get_judge
from engram_pipeline.lifecycle._gc import fewer_collections
from engram_pipeline.model import INTERNAL_COLUMNS, MEMORY_COLUMNS, SERVED_COLUMNS, STATUSES, Memory
from engram_pipeline.store import validation as v
from engram_pipeline.store.access_log import overlay_pending
from engram_pipeline.store.rows import INPUT_FIELDS
from engram_pipeline.store.write.bulk import write_checked

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

# Fields a caller may give: those of ``MemoryStore.new_row`` (INPUT_FIELDS). Store-managed fields an export
# carries, which import restores as they were: every other column but the content hash (the store derives it)
# and the internal ones.
STORE_FIELDS = frozenset(MEMORY_COLUMNS) - INPUT_FIELDS - {"content_hash", *INTERNAL_COLUMNS}
# Export column order: the table's, with ``importance_factors`` last (where exports have always put it).
EXPORT_COLUMNS = (*(c for c in SERVED_COLUMNS if c not in ("content_hash", "importance_factors")), "importance_factors")

Progress = Callable[[int], None]


@dataclass(frozen=True)
class LineError:
    """A line that could not be imported: its 1-based number and why."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True)
class ImportReport:
    lines: int  # non-blank lines read
    created: int  # rows inserted
    exact_duplicates: int  # valid lines whose content the agent already had (in the store or earlier in the file)
    batches: int  # batches committed
    errors: tuple[LineError, ...] = ()
    failed_batches: int = 0  # batches with a bad line (not written when aborting; written without it when skipping)
    dry_run: bool = False
    semantic_duplicates: int = 0  # lines folded into a row the judge calls the same fact (as ``remember`` does)
    contradictions: int = 0  # contradictions recorded between a new row and an older one
    judge: str = ""  # the judge that decided the semantic duplicates and contradictions (engram_pipeline/judge/)

    @property
    def ok(self) -> bool:
        return not self.errors


def import_jsonl(
    store: MemoryStore,
    source: str | Path | Iterable[str | Mapping[str, Any]],
    *,
    batch_size: int = 1000,
    progress: Progress | None = None,
    on_error: str = "abort",
    dry_run: bool = False,
    checks: str = "remember",
) -> ImportReport:
    """Import memories from a JSONL file path, or from an iterable of JSON lines or dicts.

    Each batch is validated whole, embedded in one ``store.engine.embed`` call, checked as ``remember`` would
    check its lines one after another and written in one append (then one compare-and-set batch each for
    the collapses and the contradictions: :func:`engram_pipeline.store.write.bulk.write_checked`).
    ``progress(n)`` is called with the number of lines each batch consumed. See the module docstring for
    how bad lines, duplicates and store-managed fields are handled.

    >>> from engram_pipeline.settings import Settings
    >>> from engram_pipeline.store import MemoryStore
    >>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
    >>> report = import_jsonl(store, ['{"agent_id": "a", "content": "User lives in Berlin"}'])
    >>> report.created, report.errors
    (1, ())
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive; got {batch_size}")
    if on_error not in ("abort", "skip"):
        raise ValueError(f"on_error must be 'abort' or 'skip'; got {on_error!r}")
    if checks not in ("remember", "exact"):
        raise ValueError(f"checks must be 'remember' or 'exact'; got {checks!r}")
    lines = created = duplicates = semantic = contradictions = batches = failed = 0
    judge_name = get_judge(store).name if checks == "remember" else ""  # exact checks: no judge decides
    errors: list[LineError] = []
    # A batch's checks allocate millions of small objects that outlive it (the per-text caches) or its checks
    # (rows, candidates): at the default threshold, 11 full collections took 3.2 of 14.5 s of a 20,000-row
    # checked import (bench_write_path.py --only bulk), under the sweep's raised threshold none.
    with fewer_collections():
        for batch in _batches(_numbered(source), batch_size):
            lines += len(batch)
            checked_at = store.engine.shard_versions()  # before the checks: store/write/insert.py
            rows, dup, bad, restored = _validate_batch(store, batch)
            if bad:
                errors.extend(bad)
                failed += 1
                if on_error == "abort":
                    if progress:
                        progress(len(batch))
                    break
            if dry_run:
                created += len(rows)  # what would be created
            elif rows:
                vectors = store.engine.embed([r["content"] for r in rows])
                for row, vec in zip(rows, vectors, strict=True):
                    row["vector"] = vec.tolist()
                checked = [checks == "remember" and r["id"] not in restored for r in rows]
                done = write_checked(store.engine, rows, checked_at=checked_at, checked=checked, actor="import")
                created += len(done.inserted)
                dup += done.lost_races  # a concurrent writer stored the same content in between
                semantic += done.semantic_duplicates
                contradictions += done.contradictions
                batches += 1
            duplicates += dup
            if progress:
                progress(len(batch))
    return ImportReport(
        lines, created, duplicates, batches, tuple(errors), failed, dry_run, semantic, contradictions, judge_name
    )


def count_lines(path: str | Path) -> int:
    """Non-blank lines of a file (for a progress bar's length)."""
    with open(path, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def _numbered(source: str | Path | Iterable[str | Mapping[str, Any]]) -> Iterator[tuple[int, Any]]:
    if isinstance(source, str | Path):
        with open(source, encoding="utf-8") as fh:
            yield from _non_blank(fh)
    else:
        yield from _non_blank(source)


def _non_blank(items: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    for n, item in enumerate(items, start=1):
        if isinstance(item, str) and not item.strip():
            continue
        yield n, item


def _batches(items: Iterator[tuple[int, Any]], size: int) -> Iterator[list[tuple[int, Any]]]:
    batch: list[tuple[int, Any]] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _validate_batch(
    store: MemoryStore, batch: Sequence[tuple[int, Any]]
) -> tuple[list[Memory], int, list[LineError], set[str]]:
    """Rows to insert (new content only), the count of exact duplicates, the bad lines of one batch, and the
    ids of the rows whose lines carry store-managed fields (restored as they were)."""
    rows: list[tuple[int, Memory]] = []
    errors: list[LineError] = []
    restored: set[str] = set()
    named_lines: set[int] = set()  # lines that give their row's id
    for n, item in batch:
        try:
            line = _parse(item)
            rows.append((n, build_row(store, line)))
        except (ValueError, TypeError) as exc:
            errors.append(LineError(n, str(exc)))
            continue
        if line.get("id") is not None:
            named_lines.add(n)
        if STORE_FIELDS & line.keys():
            restored.add(rows[-1][1]["id"])
    unparsed = len(errors)
    # Within the batch: first occurrence of a content wins; an id must not name two contents.
    fresh: list[tuple[int, Memory]] = []
    seen_hash: set[str] = set()
    hash_of_id: dict[str, str] = {}
    for n, row in rows:
        if hash_of_id.setdefault(row["id"], row["content_hash"]) != row["content_hash"]:
            errors.append(LineError(n, f"id {row['id']!r} is used by an earlier line with other content"))
        elif row["content_hash"] not in seen_hash:
            seen_hash.add(row["content_hash"])
            fresh.append((n, row))
    # Against the store, in two batched reads: content already there, and ids taken by other content (only an
    # id a line names can be: the store's own are fresh uuid4s).
    hashes = store.engine.existing_hashes([r["content_hash"] for _, r in fresh])
    named = [r["id"] for n, r in fresh if n in named_lines]
    taken = {r["id"]: r["content_hash"] for r in store.get_many(named, columns=["id", "content_hash"])} if named else {}
    out: list[Memory] = []
    for n, row in fresh:
        if row["content_hash"] in hashes:
            continue
        if row["id"] in taken:
            errors.append(LineError(n, f"id {row['id']!r} already exists in the store with other content"))
            continue
        out.append(row)
    errors.sort(key=lambda e: e.line)
    # Lines that parsed, minus those written and those refused above: content the agent already had.
    return out, len(rows) - len(out) - (len(errors) - unparsed), errors, restored


def _parse(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    try:
        value = json.loads(item)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def build_row(store: MemoryStore, line: Mapping[str, Any]) -> Memory:
    """Validate one import line and build its row (without a vector). Raises ``ValueError``."""
    unknown = set(line) - INPUT_FIELDS - STORE_FIELDS
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}")
    for key in ("agent_id", "content"):
        if key not in line:
            raise ValueError(f"missing {key!r}")
    metadata = line.get("metadata")
    if isinstance(metadata, str):  # an export writes metadata as JSON text
        try:
            metadata = json.loads(metadata) if metadata else None
        except json.JSONDecodeError:
            raise ValueError("metadata is not a JSON object") from None
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError("metadata must be a JSON object")
    tags = line.get("tags") or []
    if not isinstance(tags, list):
        raise ValueError("tags must be a list of strings")
    row = store.engine.new_row(
        line["agent_id"],
        line["content"],
        tier=_str(line, "tier", "auto"),
        kind=_str(line, "kind", "semantic"),
        tags=tags,
        source=_str(line, "source", "agent"),
        outcome=line.get("outcome"),
        pinned=_bool(line, "pinned"),
        importance=_num(line, "importance"),
        confidence=_num(line, "confidence"),
        metadata=metadata,
        memory_id=_opt_str(line, "id"),
        created_at=_time(line, "created_at"),
        ttl_s=_int(line, "ttl_s"),
        last_accessed_at=_time(line, "last_accessed_at"),
        access_count=_int(line, "access_count") or 0,
    )
    _apply_store_fields(row, line)
    return row


def _apply_store_fields(row: Memory, line: Mapping[str, Any]) -> None:
    status = line.get("status")
    if status is not None:
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
        row["status"] = status
    if line.get("superseded_by") is not None:
        row["superseded_by"] = v.check_id("superseded_by", line["superseded_by"])
    with_ = line.get("contradiction_with")
    if with_ is not None:
        row["contradiction_with"] = v.check_ids("contradiction_with", with_)
    if line.get("version") is not None:
        row["version"] = v.check_version("version", line["version"])
    if line.get("reinforcement_count") is not None:
        row["reinforcement_count"] = v.check_count("reinforcement_count", line["reinforcement_count"])
    if line.get("updated_at") is not None:
        row["updated_at"] = _time(line, "updated_at")
    for key in ("decayed_at", "expires_at"):
        if key in line:  # an explicit null clears what new_row derived (an LTM row has no expiry)
            row[key] = _time(line, key)
    if line.get("importance_factors") is not None:
        row["importance_factors"] = v.check_text("importance_factors", line["importance_factors"])


def _str(line: Mapping[str, Any], key: str, default: str) -> str:
    value = line.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _opt_str(line: Mapping[str, Any], key: str) -> str | None:
    value = line.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"{key} must be a non-empty string")
    return value


def _bool(line: Mapping[str, Any], key: str) -> bool:
    value = line.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false")
    return value


def _num(line: Mapping[str, Any], key: str) -> float | None:
    value = line.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number")
    return float(value)


def _int(line: Mapping[str, Any], key: str) -> int | None:
    value = line.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer")
    return value


def _time(line: Mapping[str, Any], key: str) -> datetime | None:
    value = line.get(key)
    if value is None:
        return None
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{key} is not an ISO-8601 time: {value!r}") from None
    else:
        raise ValueError(f"{key} must be an ISO-8601 time string")
    return v.check_time(key, ts)


# -- export ----------------------------------------------------------------------------------------------
def export_rows(store: MemoryStore, agent_ids: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every memory (of ``agent_ids``, default all agents) as an import line, agent by agent, oldest first."""
    for agent_id in agent_ids if agent_ids is not None else store.agents():
        table = overlay_pending(
            store.engine.scan(agent_id, columns=list(EXPORT_COLUMNS)), store.engine.pending_access(agent_id)
        )
        rows = table.to_pylist()
        rows.sort(key=lambda r: (r["created_at"], r["id"]))
        for row in rows:
            yield {k: _jsonable(k, row.get(k)) for k in EXPORT_COLUMNS}


def export_jsonl(store: MemoryStore, out: IO[str], agent_ids: Sequence[str] | None = None) -> int:
    """Write the export lines to ``out``; returns the number of rows written. Import reads them back."""
    n = 0
    for line in export_rows(store, agent_ids):
        out.write(json.dumps(line, ensure_ascii=False, sort_keys=False) + "\n")
        n += 1
    return n


def _jsonable(key: str, value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if key == "metadata" and isinstance(value, str):
        return json.loads(value) if value else {}
    return value
