"""``/v1/memories``: remember, get, versioned update, delete, recall, restore."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response

from engram_pipeline.api.deps import (
    CallerDep,
    MemoryDep,
    RecallBody,
    RememberWriteDep,
    RestorableDep,
    StateDep,
    StoreDep,
)
from engram_pipeline.api.models import (
    MAX_VERSION,
    DeletedOut,
    ErrorOut,
    MemoryOut,
    RecallHitOut,
    RecallResponse,
    RememberResponse,
    RestoreRequest,
    UpdateRequest,
)

AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "the body is not decodable (not UTF-8 JSON)"},
    401: {"model": ErrorOut, "description": "missing or unknown API key"},
    403: {"model": ErrorOut, "description": "the key is not scoped to this agent"},
    422: {"model": ErrorOut, "description": "invalid input; nothing was written"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "no such memory, or one of an agent this key may not access"}
}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorOut, "description": "stale expected_version; current_version says where the row is"}
}

router = APIRouter(prefix="/v1/memories", tags=["memories"])


@router.post(
    "",
    response_model=RememberResponse,
    status_code=201,
    responses={**AUTH_ERRORS, 200: {"model": RememberResponse, "description": "an existing memory matched"}},
)
async def remember(write: RememberWriteDep, request: Request) -> Response:
    """Store a memory with write-time dedup and contradiction handling.

    201 with outcome ``created`` (and any contradictions found); 200 with ``exact_duplicate`` or
    ``semantic_duplicate`` when an existing memory absorbed the write.
    """
    body = write.body
    fields = body.model_dump(exclude={"agent_id", "content"})
    result = await write.store.remember_async(body.agent_id, body.content, actor=write.caller.actor, **fields)
    metrics = request.app.state.metrics
    metrics.count("engram_remember_total", outcome=result.outcome)
    if result.contradictions:
        metrics.count("engram_remember_contradictions_total", len(result.contradictions))
    answer = RememberResponse(
        memory=MemoryOut.of(result.memory),
        outcome=result.outcome,
        score=result.score,
        contradictions=list(result.contradictions),
    )
    # Serialised here, by the model that validated it, rather than validated again and encoded by FastAPI
    # (json.dumps of its dict form): the response model above still documents it.
    status = 201 if result.outcome == "created" else 200
    return Response(answer.model_dump_json(), status_code=status, media_type="application/json")


@router.post("/recall", response_model=RecallResponse, responses=AUTH_ERRORS)
def recall(body: RecallBody, state: StateDep) -> RecallResponse:
    """The ``k`` best memories of an agent for a query text or a vector, with their scores."""
    options = body.model_dump(exclude={"agent_id", "query"})
    hits = state.store.recall(body.agent_id, body.query, track_access=False, with_vectors=False, **options)
    state.access.record(m for h in hits for m in (h.memory, *h.evidence))
    data = [
        RecallHitOut(
            memory=MemoryOut.of(h.memory),
            score=h.score,
            similarity=h.similarity,
            recency=h.recency,
            evidence=[MemoryOut.of(e) for e in h.evidence],
        )
        for h in hits
    ]
    return RecallResponse(data=data, count=len(data))


@router.get("/{memory_id}", response_model=MemoryOut, responses={**AUTH_ERRORS, **NOT_FOUND})
def get_memory(memory: MemoryDep, state: StateDep) -> MemoryOut:
    """One memory by id, whatever its status (an access: it counts for importance)."""
    state.access.record([memory])
    return MemoryOut.of(memory)


@router.patch("/{memory_id}", response_model=MemoryOut, responses={**AUTH_ERRORS, **NOT_FOUND, **CONFLICT})
def update_memory(memory: MemoryDep, body: UpdateRequest, store: StoreDep, caller: CallerDep) -> MemoryOut:
    """Change fields of a memory you read at ``expected_version``; a stale version is a 409."""
    row = store.update(
        memory["id"],
        expected_version=body.expected_version,
        actor=caller.actor,
        agent_id=memory["agent_id"],
        **body.changes(),
    )
    return MemoryOut.of(row)


@router.delete("/{memory_id}", response_model=DeletedOut, responses={**AUTH_ERRORS, **NOT_FOUND, **CONFLICT})
def delete_memory(
    memory: MemoryDep,
    store: StoreDep,
    caller: CallerDep,
    expected_version: Annotated[int, Query(ge=1, le=MAX_VERSION, description="the version you read")],
) -> DeletedOut:
    """Delete a memory you read at ``expected_version`` (a stale version is a 409 with ``current_version``).

    The full pre-image is audited; ``POST /v1/memories/{id}/restore`` brings the memory back with its id.
    """
    store.delete(memory["id"], expected_version=expected_version, actor=caller.actor)
    return DeletedOut(id=memory["id"], agent_id=memory["agent_id"], version=expected_version)


@router.post(
    "/{memory_id}/restore",
    response_model=MemoryOut,
    responses={
        **AUTH_ERRORS,
        **NOT_FOUND,
        409: {
            "model": ErrorOut,
            "description": "nothing to restore; or the memory changed after it was hidden (send its "
            "current_version as expected_version to restore it anyway) or since you read it",
        },
    },
)
def restore_memory(
    memory_id: RestorableDep, store: StoreDep, caller: CallerDep, body: Annotated[RestoreRequest | None, Body()] = None
) -> MemoryOut:
    """Bring back a pruned, merged, superseded, archived or deleted memory from its audit pre-image.

    A compare-and-set: if the memory changed after the event that hid it, restoring would revert those
    changes, so it is a 409 with ``current_version`` unless ``expected_version`` is that version.
    """
    expected = body.expected_version if body is not None else None
    return MemoryOut.of(store.restore(memory_id, expected_version=expected, actor=caller.actor))
