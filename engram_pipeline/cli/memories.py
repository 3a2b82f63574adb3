"""Commands on single memories and on whole files: init, import, export, remember, get, update, recall,
restore, delete, agents.

``init``, ``import`` and ``remember`` create the store when it does not exist; every other command refuses a
missing store with a message that says so (a mistyped ``--db`` never leaves an empty store behind).

``get`` and ``recall`` here do not count as accesses by default (an operator peeking at the store should not
raise a memory's importance); ``--track-access`` makes them behave like an agent's read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from engram_pipeline.cli._common import (
    AgentOpt,
    AgentsOpt,
    Checks,
    CliError,
    ConfidenceTier,
    Kind,
    LegacyArg,
    OnError,
    Outcome,
    Source,
    StoreTier,
    WriteTier,
    agent_and,
    emit_json,
    print_record,
    print_table,
    progress,
    state,
    warn,
)
from engram_pipeline.model import MemoryChanges, PlacedMemory, record_fields

RECORD_COLUMNS = ("id", "tier", "kind", "status", "version", "importance", "confidence", "content")

# The help of remember's and update's options is the record's note on the field (model.PlacedMemory,
# model.MemoryChanges), so the CLI says what the HTTP API and MCP say; tests/cli/test_memory_commands.py holds
# each command's options to its record's fields and defaults.
NEW = {name: note for name, (_, note) in record_fields(PlacedMemory).items()}
CHANGE = {name: note for name, (_, note) in record_fields(MemoryChanges).items()}


def _metadata(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, dict):
        raise CliError("--metadata must be a JSON object")
    return value


def init(ctx: typer.Context) -> None:
    """Create an empty store at --db (default ``<ENGRAM_HOME>/lancedb``); an existing store is left as it is."""
    st = state(ctx)
    store = st.open_store(create=True)
    info = {"uri": store.uri, "embedder": store.embedder.name, "dimension": store.embedder.dimension}
    if st.json:
        emit_json(info)
    else:
        typer.echo(f"store at {store.uri} ({store.embedder.name}, dimension {store.embedder.dimension})")


def import_(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="JSONL file")],
    batch_size: Annotated[int, typer.Option(min=1, help="lines validated, embedded and committed together")] = 1000,
    on_error: Annotated[
        OnError, typer.Option(help="abort: stop at a batch with a bad line; skip: skip the bad lines and go on")
    ] = "abort",
    dry_run: Annotated[bool, typer.Option(help="validate every line, write nothing")] = False,
    checks: Annotated[
        Checks,
        typer.Option(
            help="remember: each line gets remember's dedup and contradiction checks; exact: exact dedup only "
            "(near-duplicates and contradictions left to the passes)"
        ),
    ] = "remember",
) -> None:
    """Import memories from a JSONL file (one object per line: agent_id, content, optional fields).

    A batch with a malformed line is not written at all; each bad line is reported with its number.
    Each line gets the outcome `remember` would give it: exact duplicates are skipped, near-duplicates fold
    into the row they repeat, contradictions are recorded. Lines of an export are restored as they were.
    """
    from engram_pipeline.importer import count_lines, import_jsonl

    st = state(ctx)
    new = not st.store_exists()
    store = st.open_store(create=True)
    total = count_lines(file)
    kept = False
    try:
        with progress("import", total) as advance:
            report = import_jsonl(
                store, file, batch_size=batch_size, progress=advance, on_error=on_error, dry_run=dry_run, checks=checks
            )
        kept = not (dry_run or report.errors)
    finally:
        # A store this command made and then wrote nothing into (a dry run, a first batch refused) is removed:
        # a failed import leaves no empty tables behind.
        if new and not kept:
            store.engine.discard_if_empty()
    for err in report.errors:
        warn(f"{file}: {err}")
    if st.json:
        emit_json(report)
    else:
        verb = "would create" if dry_run else "created"
        typer.echo(
            f"{report.lines} lines: {verb} {report.created}, {report.exact_duplicates} exact duplicates, "
            f"{report.semantic_duplicates} near-duplicates folded, {report.contradictions} contradictions, "
            f"{report.batches} batches committed, {report.failed_batches} failed"
        )
    if report.errors and on_error == "abort":
        warn(f"error: {len(report.errors)} bad line(s); nothing from their batch was written; import stopped")
        raise typer.Exit(1)
    if report.errors:  # what --on-error skip asked for: the import succeeded
        warn(f"{len(report.errors)} bad line(s) skipped; every other line was imported")


def export(
    ctx: typer.Context,
    agent: AgentsOpt = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="file to write (default stdout)")] = None,
) -> None:
    """Export memories as JSONL (every field but the vector); `engram import` reads it back."""
    from engram_pipeline.importer import export_jsonl

    store = state(ctx).store
    if output is None:
        export_jsonl(store, sys.stdout, agent or None)
        return
    tmp = output.with_name(output.name + ".partial")
    with open(tmp, "w", encoding="utf-8") as fh:
        n = export_jsonl(store, fh, agent or None)
    tmp.replace(output)  # a reader never sees a half-written export
    warn(f"exported {n} memories to {output}")


def remember(
    ctx: typer.Context,
    content: Annotated[str, typer.Argument(help="the memory text", show_default=False)],
    legacy: LegacyArg = None,
    agent: AgentOpt = None,
    tier: Annotated[WriteTier, typer.Option(help=NEW["tier"])] = "auto",
    kind: Annotated[Kind, typer.Option(help=NEW["kind"])] = "semantic",
    tag: Annotated[list[str] | None, typer.Option("--tag", help=f"{NEW['tags']} (repeatable)")] = None,
    source: Annotated[Source, typer.Option(help=NEW["source"])] = "agent",
    outcome: Annotated[Outcome | None, typer.Option(help=NEW["outcome"])] = None,
    pinned: Annotated[bool, typer.Option(help=NEW["pinned"])] = False,
    importance: Annotated[float | None, typer.Option(help=NEW["importance"])] = None,
    confidence: Annotated[float | None, typer.Option(help=NEW["confidence"])] = None,
    ttl_s: Annotated[int | None, typer.Option(help=NEW["ttl_s"])] = None,
    metadata: Annotated[str | None, typer.Option(help=f"{NEW['metadata']} (as JSON text)")] = None,
    memory_id: Annotated[str | None, typer.Option("--id", help=NEW["memory_id"])] = None,
) -> None:
    """Store a memory for --agent (exact content returns the existing row; near-duplicates and contradictions
    are handled at write time)."""
    agent_id, content = agent_and(agent, content, legacy, "CONTENT")
    st = state(ctx)
    result = st.open_store(create=True).remember(
        agent_id,
        content,
        tier=tier,
        kind=kind,
        tags=tag or (),
        source=source,
        outcome=outcome,
        pinned=pinned,
        importance=importance,
        confidence=confidence,
        metadata=_metadata(metadata),
        memory_id=memory_id,
        ttl_s=ttl_s,
        actor="cli",
    )
    if st.json:
        emit_json(result)
        return
    m = result.memory
    extra = f" (similarity {result.score:.3f})" if result.score is not None else ""
    typer.echo(f"{result.outcome}{extra}: {m['id']} version {m['version']} [{m['tier']}, {m['status']}]")
    for c in result.contradictions:
        typer.echo(f"  contradicts {c.get('id', c)}: {c.get('reason', '')}")


def get(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument()],
    track_access: Annotated[bool, typer.Option(help="count this read as an access")] = False,
) -> None:
    """Show one memory, whatever its status."""
    st = state(ctx)
    row = st.store.get(memory_id, track_access=track_access)
    if st.json:
        emit_json(row)
    else:
        print_record(row)


def update(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument()],
    expected_version: Annotated[int, typer.Option(help="the version you read; a stale one is refused")],
    content: Annotated[str | None, typer.Option(help=CHANGE["content"])] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help=f"{CHANGE['tags']} (repeatable)")] = None,
    kind: Annotated[Kind | None, typer.Option(help=CHANGE["kind"])] = None,
    tier: Annotated[StoreTier | None, typer.Option(help=CHANGE["tier"])] = None,
    source: Annotated[Source | None, typer.Option(help=CHANGE["source"])] = None,
    # NEW's note: a command line cannot send a null, so --clear-outcome is what clears one
    outcome: Annotated[Outcome | None, typer.Option(help=NEW["outcome"])] = None,
    clear_outcome: Annotated[bool, typer.Option("--clear-outcome", help="clear the outcome (PATCH's null)")] = False,
    pinned: Annotated[bool | None, typer.Option("--pinned/--unpinned", help=CHANGE["pinned"])] = None,
    importance: Annotated[float | None, typer.Option(help=CHANGE["importance"])] = None,
    confidence: Annotated[float | None, typer.Option(help=CHANGE["confidence"])] = None,
    metadata: Annotated[str | None, typer.Option(help=f"{CHANGE['metadata']} (as JSON text)")] = None,
) -> None:
    """Change fields of a memory if it is still at --expected-version (compare-and-set)."""
    st = state(ctx)
    changes: dict[str, Any] = {
        k: v
        for k, v in {
            "content": content,
            "tags": tag,
            "kind": kind,
            "tier": tier,
            "source": source,
            "outcome": outcome,
            "pinned": pinned,
            "importance": importance,
            "confidence": confidence,
            "metadata": _metadata(metadata),
        }.items()
        if v is not None
    }
    if clear_outcome:
        if outcome is not None:
            raise ValueError("give --outcome or --clear-outcome, not both")
        changes["outcome"] = None
    row = st.store.update(memory_id, expected_version=expected_version, actor="cli", **changes)
    if st.json:
        emit_json(row)
    else:
        typer.echo(f"updated {row['id']}: version {expected_version} -> {row['version']}")


def recall(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="what to look for", show_default=False)],
    legacy: LegacyArg = None,
    agent: AgentOpt = None,
    k: Annotated[int, typer.Option("-k", "--k", min=1, max=100)] = 10,
    include_superseded: Annotated[bool, typer.Option()] = False,
    include_archived: Annotated[bool, typer.Option()] = False,
    tier: Annotated[list[ConfidenceTier] | None, typer.Option("--tier", help="confidence tier (repeatable)")] = None,
    min_confidence: Annotated[float | None, typer.Option()] = None,
    track_access: Annotated[bool, typer.Option(help="count the hits as accessed")] = False,
) -> None:
    """The k best memories of --agent for a query (0.7 similarity + 0.2 recency + 0.1 importance)."""
    agent_id, query = agent_and(agent, query, legacy, "QUERY")
    st = state(ctx)
    st.known_agents([agent_id])
    hits = st.store.recall(
        agent_id,
        query,
        k=k,
        include_superseded=include_superseded,
        include_archived=include_archived,
        tiers=[t.value for t in tier] if tier else None,
        min_confidence=min_confidence,
        track_access=track_access,
    )
    if st.json:
        emit_json(hits)
        return
    rows = [{"score": h.score, "similarity": h.similarity, **h.memory} for h in hits]
    print_table(rows, ("score", "similarity", *RECORD_COLUMNS))


def restore(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument()],
    expected_version: Annotated[
        int | None,
        typer.Option(help="the version you read: needed when the memory changed after it was hidden"),
    ] = None,
) -> None:
    """Bring back a pruned, merged, superseded, archived or deleted memory from its audit pre-image.

    If the memory changed after it was hidden, restoring reverts those changes: that is refused unless
    --expected-version is its current version.
    """
    st = state(ctx)
    row = st.store.restore(memory_id, expected_version=expected_version, actor="cli")
    if st.json:
        emit_json(row)
    else:
        typer.echo(f"restored {row['id']}: version {row['version']} [{row['status']}] {row['content']}")


def delete(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument()],
    expected_version: Annotated[int | None, typer.Option(help="refuse if the memory moved past it")] = None,
) -> None:
    """Delete a memory (audited with its full pre-image; `engram restore` brings it back)."""
    st = state(ctx)
    st.store.delete(memory_id, expected_version=expected_version, actor="cli")
    if st.json:
        emit_json({"deleted": memory_id})
    else:
        typer.echo(f"deleted {memory_id}")


def agents(ctx: typer.Context) -> None:
    """Every agent with its memory counts by status."""
    from engram_pipeline.model import STATUSES

    st = state(ctx)
    counts = st.store.engine.counts_by_status()
    rows = [
        {"agent_id": a, "memories": sum(counts[a].values()), **{s: counts[a].get(s, 0) for s in STATUSES}}
        for a in sorted(counts)
    ]
    if st.json:
        emit_json(rows)
    else:
        print_table(rows, ("agent_id", "memories", *STATUSES))
