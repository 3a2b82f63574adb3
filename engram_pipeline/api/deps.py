"""Dependencies of the routes: the store, the caller, and the memory or agent a route acts on.

Authentication, tenancy (403) and not-found (404) are decided here, once; routes receive what they may touch.
The dependencies that only read the app's state (the store, the caller, a scope check) are ``async``: FastAPI
runs a synchronous dependency in its thread pool, a hand-off to a worker thread and back for each, which cost
more than the dependency itself. Those that read the store stay synchronous, off the event loop.
A memory id of an agent the caller may not access is answered exactly like an unknown id (404), so a key
cannot probe which ids exist elsewhere; agent ids in paths and bodies stay 403 (they are the key's scope).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from engram_pipeline.api.access import AccessRecorder
from engram_pipeline.api.auth import LOCAL_CALLER, Caller, KeyRing, is_loopback
from engram_pipeline.api.models import ID_PATTERN, MAX_ID_CHARS, RecallRequest, RememberRequest
from engram_pipeline.model import Memory
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryNotFound, MemoryStore, UnknownAgent


@dataclass
class ApiState:
    """What the app holds for its lifetime (``app.state.engram``).

    ``ready`` turns true once :meth:`warm_up` has embedded a text and read the store (``GET /readyz``); the
    lifespan starts it in the background, so that the server answers while the model loads.
    """

    store: MemoryStore
    settings: Settings
    keys: KeyRing
    access: AccessRecorder
    ready: bool = False
    _warming: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def warm_up(self) -> None:
        """Load the embedder (one embedding) and touch the memories table; then the state is ready. A call
        while another warms up waits for it."""
        with self._warming:
            if not self.ready:
                self.store.embedder.embed(["warm up"])
                self.store.count()
                self.ready = True


async def get_state(request: Request) -> ApiState:
    state: ApiState | None = getattr(request.app.state, "engram", None)
    if state is None:  # the lifespan did not run (or failed to open the store)
        raise HTTPException(503, "the memory store is not open")
    return state


StateDep = Annotated[ApiState, Depends(get_state)]


async def get_store(state: StateDep) -> MemoryStore:
    return state.store


StoreDep = Annotated[MemoryStore, Depends(get_store)]

bearer = HTTPBearer(auto_error=False, description="API key: `Authorization: Bearer <token>`")


async def get_caller(
    request: Request,
    state: StateDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """The caller of this request: the key's owner, or ``local`` when no keys are configured."""
    challenge = {"WWW-Authenticate": "Bearer"}
    if not state.keys.enabled:
        # No keys: only loopback callers are served (the server also refuses to bind elsewhere).
        if request.client is not None and not is_loopback(request.client.host):
            raise HTTPException(401, "no API keys are configured; only loopback callers are served", challenge)
        return LOCAL_CALLER
    if credentials is None:
        raise HTTPException(401, "missing API key: send Authorization: Bearer <token>", challenge)
    caller = state.keys.lookup(credentials.credentials)
    if caller is None:
        raise HTTPException(401, "unknown API key", challenge)
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]


def authorize(caller: Caller, agent_id: str) -> None:
    """Refuse (403) a caller whose key is not scoped to ``agent_id``."""
    if not caller.may_access(agent_id):
        raise HTTPException(403, f"API key {caller.name!r} may not access agent {agent_id!r}")


async def get_admin(caller: CallerDep) -> Caller:
    if not caller.admin:
        raise HTTPException(403, f"API key {caller.name!r} is not an admin key; lifecycle passes need one")
    return caller


AdminDep = Annotated[Caller, Depends(get_admin)]


async def get_recall_body(body: RecallRequest, caller: CallerDep) -> RecallRequest:
    """A recall request for an agent the caller may read (else 403)."""
    authorize(caller, body.agent_id)
    return body


@dataclass(frozen=True)
class RememberWrite:
    """What the remember route needs: the store, the caller and a request for an agent it may write to."""

    store: MemoryStore
    caller: Caller
    body: RememberRequest


async def get_remember_write(
    request: Request,
    body: RememberRequest,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> RememberWrite:
    """A remember request for an agent the caller may write to (else 403), with the store and the caller, as
    one dependency: FastAPI resolves every dependency of a chain anew for each request (its scopes, its cache
    key, whether it is a generator), and the chain of state, store, caller and scope check took 0.70 of
    1.35 s of the event loop's CPU under a profile of 1,620 remembers (0.31 once one)."""
    state = await get_state(request)
    caller = await get_caller(request, state, credentials)
    authorize(caller, body.agent_id)
    return RememberWrite(state.store, caller, body)


RememberWriteDep = Annotated[RememberWrite, Depends(get_remember_write)]
RecallBody = Annotated[RecallRequest, Depends(get_recall_body)]

MemoryIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN)]
AgentIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN)]
PlanIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN)]


async def get_agent(agent_id: AgentIdPath, caller: CallerDep) -> str:
    authorize(caller, agent_id)
    return agent_id


AgentDep = Annotated[str, Depends(get_agent)]


def get_known_agent(agent_id: AgentDep, store: StoreDep) -> str:
    """An agent the caller may access (403) that has memories in the store (else 404: unknown agent)."""
    if not store.engine.has_agent(agent_id):
        raise UnknownAgent(agent_id)
    return agent_id


KnownAgentDep = Annotated[str, Depends(get_known_agent)]


def visible_to(caller: Caller, memory_id: str, agent_id: str | None) -> None:
    """Refuse a memory the caller may not see as not found (404), whether it is another agent's or unknown."""
    if agent_id is None or not caller.may_access(agent_id):
        raise MemoryNotFound(memory_id)


def get_memory(memory_id: MemoryIdPath, store: StoreDep, caller: CallerDep) -> Memory:
    """The memory named in the path, if it exists and belongs to an agent the caller may access (else 404)."""
    rows = store.get_many([memory_id])
    visible_to(caller, memory_id, rows[0]["agent_id"] if rows else None)
    return rows[0]


MemoryDep = Annotated[Memory, Depends(get_memory)]


def get_restorable(memory_id: MemoryIdPath, store: StoreDep, caller: CallerDep) -> str:
    """A memory id to restore: the row may be gone (pruned, deleted), so its agent comes from the audit."""
    rows = store.get_many([memory_id], columns=["id", "agent_id"])
    if rows:
        agent_id = rows[0]["agent_id"]
    else:
        found = store.engine.last_pre_image(memory_id)
        agent_id = found[0]["agent_id"] if found is not None else None
    visible_to(caller, memory_id, agent_id)
    return memory_id


RestorableDep = Annotated[str, Depends(get_restorable)]
