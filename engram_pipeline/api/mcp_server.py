"""The memory tools over MCP (Model Context Protocol, stdio transport) for one agent fixed at start.

Tools: ``remember``, ``recall``, ``get_memory``, ``update_memory`` and ``delete_memory`` (both need
``expectedVersion``; a stale one is a ``CONFLICT`` error telling the agent to re-read), ``restore_memory``,
``promote_memories`` (STM promotion, run now), ``consolidate_corpus`` (``dryRun`` defaults to true;
applying names a reviewed ``planId`` and needs a server started with ``--admin``), ``discard_merge_plan``
(admin too) and ``get_health``. The embedder loads in the background from the start: the server answers at
once, and the first tool that embeds waits for the load.

``remember``'s options and ``update_memory``'s fields are derived from ``model.NewMemory`` and
``model.MemoryChanges`` (as the HTTP API's request models are): one argument per field of the record, with its
type, default (a change has none: an argument not given is not changed) and note as the description.

Naming: tools are ``verb_noun`` in snake_case, arguments camelCase (the HTTP API and the Python client are
snake_case throughout). Every argument has a description, and its bounds are in the schema (``k`` 1..100,
unit floats 0..1, versions from 1); every tool says whether it only reads, adds, or changes what is there
(``readOnlyHint``, ``destructiveHint``, ``idempotentHint``).

``consolidate_corpus`` plans by default (``dryRun`` true: a plan is stored for review and its ``planId`` and
numbered clusters returned). Applying (``dryRun`` false) takes the ``planId`` of the reviewed plan and the
numbers of the clusters to ``reject``, and applies exactly it but those, and only on a server started with
``admin=True`` (``engram mcp --agent A --admin``): an agent cannot merge its own memories away unreviewed.
A discarded or expired plan is a ``CONFLICT`` error, and nothing is written.

Arguments are strictly typed (``true`` is not ``1``, ``"5"`` is not a number); their values are checked by
the store (:mod:`engram_pipeline.store.validation`), whose refusals are ``INVALID_INPUT`` errors naming the
field. Every tool acts on the agent the server was started for; ids of other agents' memories are reported as not
found. Writes are audited with actor ``mcp:<agent_id>``. Errors the agent can act on are tool errors
(``isError``) whose text says what to do.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import MISSING, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from engram_pipeline import lifecycle
from engram_pipeline.api.models import MemoryOut
from engram_pipeline.lifecycle.merge_review import discard_plan
from engram_pipeline.model import NEW_MEMORY_DEFAULTS, MemoryChanges, NewMemory, record_fields
from engram_pipeline.reporting import health_json
from engram_pipeline.reporting import report_json as as_json
from engram_pipeline.settings import Settings
from engram_pipeline.store import (
    InvalidInput,
    MemoryNotFound,
    MemoryStore,
    NothingToRestore,
    PlanClosed,
    PlanNotFound,
    RestoreConflict,
    RestoreDuplicate,
    VersionConflict,
)
from engram_pipeline.store.recall import MAX_K
from engram_pipeline.store.validation import MAX_TAGS, MAX_TTL_S, check_id

Tier = Literal["hot", "warm", "cold", "archive"]


def _arg(description: str, **bounds: Any) -> Any:
    """A tool argument's description and JSON-schema bounds (``minimum``, ``maximum``, ``maxItems``, ...).

    The bounds are published in the schema for the model to read; the store checks the same bounds, so that a
    value outside them is an ``INVALID_INPUT`` error whose text names the field and the rule."""
    return Field(description=description, json_schema_extra=bounds or None)


# The arguments the tools share (camelCase, as MCP tool schemas usually are; HTTP and Python are snake_case).
MemoryId = Annotated[StrictStr, _arg("id of one of this agent's memories")]
ExpectedVersion = Annotated[
    StrictInt, _arg("the version you read with get_memory; a stale one is a CONFLICT error", minimum=1)
]

# -- arguments derived from the records of model.py (NewMemory for remember, MemoryChanges for update_memory) --
# The JSON-schema bounds of the fields whose values the store bounds (its limits, published for the model to read);
# every field has the record's type, strictly, and the record's note as its description.
_BOUNDS: dict[str, dict[str, Any]] = {
    "tags": {"maxItems": MAX_TAGS},
    "importance": {"minimum": 0, "maximum": 1},
    "confidence": {"minimum": 0, "maximum": 1},
    "ttl_s": {"minimum": 1, "maximum": MAX_TTL_S},
}
_STRICT: dict[Any, Any] = {str: StrictStr, bool: StrictBool, float: StrictFloat, int: StrictInt}


def _strict(hint: Any) -> Any:
    """A record's type with strict scalars (``true`` is not ``1``, ``"5"`` is not a number), sequences as lists."""
    if hint in _STRICT:
        return _STRICT[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        return Union[tuple(_strict(a) for a in args)]  # noqa: UP007  (built from a tuple)
    if origin in (list, Sequence):
        return list[_strict(args[0])]  # type: ignore[misc]
    return hint  # a Literal, a JSON object (dict[str, Any]), None


def camel(name: str) -> str:
    """A record's field name as an MCP argument (``ttl_s`` is ``ttlS``)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _record_args(record: type, defaults: Mapping[str, Any] | None) -> list[inspect.Parameter]:
    """One keyword argument per key of ``record``, or null; its default the record's (``defaults``), or none at
    all when ``defaults`` is None (a change: an argument not given is not changed)."""
    params = []
    for name, (hint, note) in record_fields(record).items():
        field = Field(description=note, json_schema_extra=_BOUNDS.get(name))
        kind: Any = Annotated[_strict(hint) | None, field]
        default = MISSING if defaults is None else defaults[name]
        params.append(inspect.Parameter(camel(name), inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind))
    return params


def _record_tool(record: type, defaults: Mapping[str, Any] | None = None) -> Callable[[Any], Any]:
    """Publish a tool function ``fn(..., **fields)`` with the arguments of ``record`` in place of ``**fields``
    (the SDK reads a tool's arguments from its signature), so that the tool and the record cannot drift."""

    def publish(fn: Any) -> Any:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        fn.__signature__ = sig.replace(parameters=[*own, *_record_args(record, defaults)])
        return fn

    return publish


def _given(record: type, args: Mapping[str, Any]) -> dict[str, Any]:
    """The record's fields among a tool's arguments, by their record names: an argument not given, or null where
    the record's type has no null, is left out (null clears only what can be cleared: an update's outcome)."""
    out = {}
    for name, (hint, _) in record_fields(record).items():
        value = args.get(camel(name), MISSING)
        if value is not MISSING and (value is not None or NoneType in get_args(hint)):
            out[name] = value
    return out


# What each tool does to the store, for clients that ask before calling (hints, per the MCP spec).
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
EDIT = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


def _memory(row: dict[str, Any]) -> dict[str, Any]:
    return MemoryOut.of(row).model_dump(mode="json")


def build_mcp(store: MemoryStore, agent_id: str, *, admin: bool = False) -> MCPServer:
    """An MCP server whose tools read and write ``agent_id``'s memories in ``store`` (``admin``: its
    ``consolidate_corpus`` may apply a reviewed merge plan)."""
    actor = f"mcp:{agent_id}"
    server: MCPServer = MCPServer(
        name="engram-memory",
        instructions=(
            f"Long-term memory of agent {agent_id!r}. remember stores a fact; recall finds relevant ones. "
            "To edit, get_memory first and pass its version as expectedVersion to update_memory."
        ),
    )

    def guarded(fn: Any) -> Any:
        """Turn store errors into tool errors that tell the agent what to do."""

        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except RestoreConflict as exc:
                raise ToolError(
                    f"CONFLICT: memory {exc.memory_id} changed after the {exc.action} that hid it (it is now at "
                    f"version {exc.current}); restoring would revert those changes. Read it with get_memory, and "
                    f"to restore it anyway call restore_memory with expectedVersion {exc.current}."
                ) from None
            except VersionConflict as exc:
                if exc.current is None:
                    raise ToolError(f"NOT_FOUND: memory {exc.memory_id} no longer exists") from None
                raise ToolError(
                    f"CONFLICT: memory {exc.memory_id} changed since you read it (you sent expectedVersion "
                    f"{exc.expected}, it is now at version {exc.current}). Re-read it with get_memory, "
                    "re-apply your change, and retry with the new version."
                ) from None
            except RestoreDuplicate as exc:
                raise ToolError(f"CONFLICT: {exc}") from None
            except (MemoryNotFound, NothingToRestore, PlanNotFound) as exc:
                raise ToolError(f"NOT_FOUND: {exc}") from None
            except PlanClosed as exc:
                raise ToolError(f"CONFLICT: {exc}") from None
            except InvalidInput as exc:
                raise ToolError(f"INVALID_INPUT: {exc}") from None

        return run

    def known() -> None:
        """Refuse a pass or a report on an agent with no memories, like the HTTP API (404) and the CLI."""
        if not store.engine.has_agent(agent_id):
            raise ToolError(f"NOT_FOUND: unknown agent {agent_id!r}: it has no memories yet (remember one first)")

    def own(memory_id: str) -> dict[str, Any]:
        return store.get(memory_id, agent_id=agent_id, track_access=False)

    @server.tool(
        description="Store a memory; returns it with the outcome (created or duplicate) and contradictions.",
        annotations=ADD,  # exact content returns the existing row
    )
    @_record_tool(NewMemory, NEW_MEMORY_DEFAULTS)
    def remember(
        content: Annotated[StrictStr, _arg("the fact, preference or event to remember, in plain words")],
        **options: Any,
    ) -> dict[str, Any]:
        result = guarded(store.remember)(agent_id, content, **_given(NewMemory, options), actor=actor)
        return {
            "memory": _memory(result.memory),
            "outcome": result.outcome,
            "score": result.score,
            "contradictions": list(result.contradictions),
        }

    @server.tool(
        description=f"The k (1..{MAX_K}) memories most relevant to a query, best first, with scores.",
        annotations=READ,
    )
    def recall(
        query: Annotated[StrictStr, _arg("what to look for, in plain words")],
        k: Annotated[StrictInt, _arg("how many memories", minimum=1, maximum=MAX_K)] = 10,
        includeSuperseded: Annotated[StrictBool, _arg("also memories merged into another")] = False,
        includeArchived: Annotated[StrictBool, _arg("also archived memories")] = False,
        tiers: Annotated[list[Tier] | None, _arg("only these confidence tiers", minItems=1)] = None,
        minConfidence: Annotated[StrictFloat | None, _arg("only memories this confident", minimum=0, maximum=1)] = None,
    ) -> dict[str, Any]:
        hits = guarded(store.recall)(
            agent_id,
            query,
            k=k,
            include_superseded=includeSuperseded,
            include_archived=includeArchived,
            tiers=tiers,
            min_confidence=minConfidence,
            with_vectors=False,
        )
        data = [
            {
                "memory": _memory(h.memory),
                "score": h.score,
                "similarity": h.similarity,
                **({"evidence": [_memory(e) for e in h.evidence]} if h.evidence else {}),
            }
            for h in hits
        ]
        return {"data": data, "count": len(data)}

    @server.tool(description="One memory by id, with its current version (pass it to update_memory).", annotations=READ)
    def get_memory(id: MemoryId) -> dict[str, Any]:
        return _memory(guarded(store.get)(id, agent_id=agent_id))

    @server.tool(
        description="Edit a memory. expectedVersion must be the version you read; if the memory changed since, "
        "you get a CONFLICT error: re-read it with get_memory and retry.",
        annotations=EDIT,
    )
    @_record_tool(MemoryChanges)
    def update_memory(id: MemoryId, expectedVersion: ExpectedVersion, **fields: Any) -> dict[str, Any]:
        changes = _given(MemoryChanges, fields)
        guarded(own)(id)
        row = guarded(store.update)(id, expected_version=expectedVersion, actor=actor, agent_id=agent_id, **changes)
        return _memory(row)

    @server.tool(
        description="Delete a memory. expectedVersion must be the version you read (CONFLICT if it changed); "
        "restore_memory brings a deleted memory back.",
        annotations=EDIT,
    )
    def delete_memory(id: MemoryId, expectedVersion: ExpectedVersion) -> dict[str, Any]:
        row = guarded(own)(id)
        guarded(store.delete)(id, expected_version=expectedVersion, actor=actor)
        return {"id": id, "agent_id": row["agent_id"], "version": expectedVersion, "deleted": True}

    @server.tool(
        description="Bring back a pruned, merged, superseded, archived or deleted memory. If it changed after "
        "it was hidden you get a CONFLICT error (restoring would revert those changes): read it with get_memory "
        "and pass its version as expectedVersion to restore it anyway.",
        annotations=EDIT,  # restoring reverts to the pre-image
    )
    def restore_memory(
        id: MemoryId,
        expectedVersion: Annotated[
            StrictInt | None, _arg("its current version, to restore a memory changed after it was hidden", minimum=1)
        ] = None,
    ) -> dict[str, Any]:
        def owner() -> str | None:
            rows = store.get_many([id], columns=["id", "agent_id"])
            found = None if rows else store.engine.last_pre_image(id)
            return rows[0]["agent_id"] if rows else (found[0]["agent_id"] if found else None)

        if guarded(owner)() != agent_id:
            raise ToolError(f"NOT_FOUND: memory {id!r} does not exist")
        return _memory(guarded(store.restore)(id, expected_version=expectedVersion, actor=actor))

    @server.tool(
        description="Promote short-term memories that earned it (accesses and importance) to long-term memory, now.",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )
    def promote_memories() -> dict[str, Any]:
        known()
        return as_json(guarded(lambda: lifecycle.promote_stm(store, agent_id))())

    def reviewed_plan(planId: str | None, verb: str) -> str:
        """``planId``, an admin's, of a plan of this agent (else the tool error that says why)."""
        if not admin:
            raise ToolError(
                f"FORBIDDEN: {verb} a merge plan needs an admin MCP server (engram mcp --agent A --admin); "
                "ask an operator to review the plan"
            )
        if planId is None:
            raise ToolError(f"INVALID_INPUT: {verb} needs planId, the plan_id a dry run returned and was reviewed")
        found = store.engine.get_plan(planId)
        if found is None or found["agent_id"] != agent_id:
            raise ToolError(f"NOT_FOUND: no corpus-merge plan {planId!r} for this agent; run a dry run first")
        return planId

    @server.tool(
        description="Plan merging near-duplicate memories: dryRun (the default) stores a plan for review and "
        "returns its plan_id and numbered clusters. dryRun=false with planId applies exactly the reviewed plan "
        "but the clusters whose numbers are in reject (admin servers only); rejected clusters are not proposed "
        "again while their memories keep their content.",
        annotations=EDIT,  # applying supersedes (hides) the merged members; restore_memory undoes it
    )
    def consolidate_corpus(
        dryRun: Annotated[StrictBool, _arg("true: only plan and store the plan for review")] = True,
        planId: Annotated[StrictStr | None, _arg("the reviewed plan to apply (with dryRun false)")] = None,
        reject: Annotated[
            list[StrictInt] | None,
            _arg("numbers (from 1) of the plan's clusters not to merge, with dryRun false; not proposed again"),
        ] = None,
    ) -> dict[str, Any]:
        known()
        if dryRun:
            if planId is not None or reject:
                raise ToolError("INVALID_INPUT: planId and reject are only used to apply: send dryRun=false")
            plan = lifecycle.consolidate_corpus
            return as_json(guarded(lambda: plan(store, agent_id, dry_run=True))())
        reviewed = reviewed_plan(planId, "applying")
        apply = lifecycle.apply_corpus_merge
        return as_json(guarded(lambda: apply(store, agent_id, reviewed, reject=reject or [], actor=actor))())

    @server.tool(
        description="Discard a pending merge plan whole (admin servers only): nothing is merged, and a later "
        "plan may propose its clusters again.",
        annotations=EDIT,
    )
    def discard_merge_plan(
        planId: Annotated[StrictStr, _arg("the pending plan to discard, as a dry run returned it")],
    ) -> dict[str, Any]:
        reviewed = reviewed_plan(planId, "discarding")
        return as_json(guarded(lambda: discard_plan(store, agent_id, reviewed, actor=actor))())

    @server.tool(
        description="Counts by status, tier and confidence tier, and what the passes last did.", annotations=READ
    )
    def get_health() -> dict[str, Any]:
        known()
        return health_json(guarded(lambda: lifecycle.health(store, agent_id))())

    return server


def run_mcp(agent_id: str, settings: Settings, *, admin: bool = False) -> None:
    """Open the store from ``settings`` and serve ``agent_id``'s memory tools over stdio until EOF."""
    check_id("agent_id", agent_id)
    store = MemoryStore.open(settings=settings)
    # Load the model in the background: the server answers initialize and tools/list at once, and the first
    # tool that embeds waits for the load (the embedders load once per process, under a lock).
    threading.Thread(target=_warm_up, args=(store,), name="engram-warm-up", daemon=True).start()
    build_mcp(store, agent_id, admin=admin).run("stdio")


def _warm_up(store: MemoryStore) -> None:
    try:
        store.embedder.embed(["warm up"])
    except Exception as exc:  # the tool that embeds reports it to the client
        print(f"engram mcp: the embedder did not load: {exc}", file=sys.stderr)
