"""The memory tools over MCP (Model Context Protocol, stdio transport) for one agent fixed at start.

Tools: ``remember``, ``recall``, ``get_memory``, ``update_memory`` and ``delete_memory`` (both need
``expectedVersion``; a stale one is a ``CONFLICT`` error telling the agent to re-read), ``restore_memory``,
``consolidate_memories`` (STM promotion, run now), ``consolidate_corpus`` (``dryRun`` defaults to true) and
``memory_health``. The embedder is loaded before the server reads its first request.

Every tool acts on the agent the server was started for; ids of other agents' memories are reported as not
found. Writes are audited with actor ``mcp:<agent_id>``. Errors the agent can act on are tool errors
(``isError``) whose text says what to do.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from engram_pipeline.api.models import MemoryOut
from engram_pipeline.api.passes import PassUnavailable, as_json, health_json, lifecycle
from engram_pipeline.settings import Settings
from engram_pipeline.store import InvalidInput, MemoryNotFound, MemoryStore, NothingToRestore, VersionConflict

Kind = Literal["episodic", "semantic", "procedural", "schema"]
Tier = Literal["hot", "warm", "cold", "archive"]


def _memory(row: dict[str, Any]) -> dict[str, Any]:
    return MemoryOut.of(row).model_dump(mode="json")


def build_mcp(store: MemoryStore, agent_id: str) -> MCPServer:
    """An MCP server whose tools read and write ``agent_id``'s memories in ``store``."""
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
            except VersionConflict as exc:
                if exc.current is None:
                    raise ToolError(f"NOT_FOUND: memory {exc.memory_id} no longer exists") from None
                raise ToolError(
                    f"CONFLICT: memory {exc.memory_id} changed since you read it (you sent expectedVersion "
                    f"{exc.expected}, it is now at version {exc.current}). Re-read it with get_memory, "
                    "re-apply your change, and retry with the new version."
                ) from None
            except (MemoryNotFound, NothingToRestore) as exc:
                raise ToolError(f"NOT_FOUND: {exc}") from None
            except InvalidInput as exc:
                raise ToolError(f"INVALID_INPUT: {exc}") from None
            except PassUnavailable as exc:
                raise ToolError(f"UNAVAILABLE: {exc}") from None

        return run

    def own(memory_id: str) -> dict[str, Any]:
        return store.get(memory_id, agent_id=agent_id, track_access=False)

    @server.tool(description="Store a memory; returns it with the outcome (created or duplicate) and contradictions.")
    def remember(
        content: str,
        tags: list[str] | None = None,
        kind: Kind = "semantic",
        pinned: bool = False,
        importance: float | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        result = guarded(store.remember)(
            agent_id,
            content,
            tags=tags or [],
            kind=kind,
            pinned=pinned,
            importance=importance,
            metadata=metadata,
            actor=actor,
        )
        return {
            "memory": _memory(result.memory),
            "outcome": result.outcome,
            "score": result.score,
            "contradictions": list(result.contradictions),
        }

    @server.tool(description="The k (1..100) memories most relevant to a query, best first, with scores.")
    def recall(
        query: str,
        k: int = 10,
        includeSuperseded: bool = False,
        includeArchived: bool = False,
        tiers: list[Tier] | None = None,
        minConfidence: float | None = None,
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
        data = [{"memory": _memory(h.memory), "score": h.score, "similarity": h.similarity} for h in hits]
        return {"data": data, "count": len(data)}

    @server.tool(description="One memory by id, with its current version (pass it to update_memory).")
    def get_memory(id: str) -> dict[str, Any]:
        return _memory(guarded(store.get)(id, agent_id=agent_id))

    @server.tool(
        description="Edit a memory. expectedVersion must be the version you read; if the memory changed since, "
        "you get a CONFLICT error: re-read it with get_memory and retry."
    )
    def update_memory(
        id: str,
        expectedVersion: int,
        content: str | None = None,
        tags: list[str] | None = None,
        importance: float | None = None,
        confidence: float | None = None,
        pinned: bool | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        given = {
            "content": content,
            "tags": tags,
            "importance": importance,
            "confidence": confidence,
            "pinned": pinned,
            "metadata": metadata,
        }
        changes = {k: v for k, v in given.items() if v is not None}
        guarded(own)(id)
        row = guarded(store.update)(id, expected_version=expectedVersion, actor=actor, agent_id=agent_id, **changes)
        return _memory(row)

    @server.tool(
        description="Delete a memory. expectedVersion must be the version you read (CONFLICT if it changed); "
        "restore_memory brings a deleted memory back."
    )
    def delete_memory(id: str, expectedVersion: int) -> dict[str, Any]:
        row = guarded(own)(id)
        guarded(store.delete)(id, expected_version=expectedVersion, actor=actor)
        return {"id": id, "agent_id": row["agent_id"], "version": expectedVersion, "deleted": True}

    @server.tool(description="Bring back a pruned, merged, superseded, archived or deleted memory.")
    def restore_memory(id: str) -> dict[str, Any]:
        found = store.last_pre_image(id)
        rows = store.get_many([id], columns=["id", "agent_id"])
        owner = rows[0]["agent_id"] if rows else (found[0]["agent_id"] if found else None)
        if owner != agent_id:
            raise ToolError(f"NOT_FOUND: memory {id!r} does not exist")
        return _memory(guarded(store.restore)(id, actor=actor))

    @server.tool(description="Promote short-term memories that earned it to long-term memory, now.")
    def consolidate_memories() -> dict[str, Any]:
        return as_json(guarded(lambda: lifecycle("promotion", "promote_stm")(store, agent_id))())

    @server.tool(
        description="Plan merging near-duplicate memories (dryRun, the default, only plans; dryRun=false "
        "applies the latest reviewed plan)."
    )
    def consolidate_corpus(dryRun: bool = True) -> dict[str, Any]:
        run = guarded(lambda: lifecycle("corpus_merge", "consolidate_corpus")(store, agent_id, dry_run=dryRun))
        return as_json(run())

    @server.tool(description="Counts by status, tier and confidence tier, and what the passes last did.")
    def memory_health() -> dict[str, Any]:
        if not store.has_agent(agent_id):
            raise ToolError(f"NOT_FOUND: unknown agent {agent_id!r}: it has no memories yet (remember one first)")
        return health_json(guarded(lambda: lifecycle("health", "health")(store, agent_id))())

    return server


def run_mcp(agent_id: str, settings: Settings) -> None:
    """Open the store from ``settings`` and serve ``agent_id``'s memory tools over stdio until EOF."""
    if not agent_id.strip():
        raise InvalidInput("the MCP server needs an agent id")
    store = MemoryStore.open(settings=settings)
    store.embedder.embed(["warm up"])  # load the model before the first tool call, not during it
    build_mcp(store, agent_id).run("stdio")
