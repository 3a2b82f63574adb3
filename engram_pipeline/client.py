"""A synchronous Python client for the memory API (``engram serve``), on httpx.

::

    from engram_pipeline.client import EngramClient, VersionConflict

    with EngramClient("http://127.0.0.1:8080", api_key="tok-alice") as client:
        made = client.remember("alice", "User prefers dark mode", tags=["ui"])
        hits = client.recall("alice", "which theme?", k=5)
        try:
            client.update(made.memory.id, expected_version=made.memory.version, importance=0.8)
        except VersionConflict as exc:
            print("re-read, it is at", exc.current_version)
        print(client.cognitive.health("alice").report["overall_score"])

Responses are typed: the memory verbs answer with the HTTP API's own models (``MemoryOut``, ``RememberResponse``,
... from :mod:`engram_pipeline.api.models`; ``client.remember`` and the other first names are aliases of
``client.memories``), the lifecycle passes with the API's ``ReportResponse`` (``pass_name``, ``agent_id`` and the pass's
``report`` as JSON): the client keeps no field list of its own; errors are typed (:class:`NotFound`,
:class:`Forbidden`, :class:`VersionConflict` with ``current_version``, ...). Every call has a timeout. A call
whose connection could not be made is retried; reads (get, recall, health) are also retried on timeouts,
dropped connections and 502/503/504. Writes are not retried once sent: a versioned update that reached the
server and lost its answer would come back as a conflict.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, Unpack
from urllib.parse import quote

import httpx

from engram_pipeline.settings import DEFAULT_API_URL

if TYPE_CHECKING:
    from pydantic import BaseModel

    from engram_pipeline.model import MemoryChanges, NewMemory

    class RememberOptions(NewMemory, total=False):
        """``RememberRequest``'s fields beside the agent and the content: the record's, and an embedding."""

        vector: Sequence[float] | None

    from engram_pipeline.api.models import (
        DeletedOut,
        MemoryOut,
        RecallHitOut,
        RecallResponse,
        RememberResponse,
        ReportResponse,
    )

RETRY_STATUS = {502, 503, 504}


# -- errors ----------------------------------------------------------------------------------------------
class EngramError(Exception):
    """An error answer from the API (``status`` and the server's ``detail``), or no answer at all (status 0)."""

    def __init__(self, status: int, detail: str, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.body = body or {}
        super().__init__(f"{status}: {detail}" if status else detail)


class Unauthorized(EngramError):
    """401: missing or unknown API key."""


class Forbidden(EngramError):
    """403: the key is not scoped to this agent, or is not an admin key."""


class NotFound(EngramError):
    """404: no such memory (or agent)."""


class VersionConflict(EngramError):
    """409 on a stale ``expected_version``: re-read the memory (``current_version``) and retry."""

    def __init__(self, status: int, detail: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(status, detail, body)
        self.current_version: int | None = self.body.get("current_version")


class Conflict(EngramError):
    """409 without a version (e.g. nothing to restore)."""


class InvalidRequest(EngramError):
    """400 or 422: the request is malformed; ``detail`` says what is wrong. Nothing was written."""


class ServerError(EngramError):
    """5xx, or the server could not be reached (status 0) after the retries."""


def _error(response: httpx.Response) -> EngramError:
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text}
    if not isinstance(body, dict):
        body = {"detail": str(body)}
    detail = str(body.get("detail", response.reason_phrase))
    status = response.status_code
    if status == 409:
        return (VersionConflict if body.get("current_version") is not None else Conflict)(status, detail, body)
    kind = {401: Unauthorized, 403: Forbidden, 404: NotFound, 400: InvalidRequest, 422: InvalidRequest}.get(status)
    return (kind or (ServerError if status >= 500 else EngramError))(status, detail, body)


# -- the client ------------------------------------------------------------------------------------------
class EngramClient:
    """The memory API at ``base_url``, with a bearer ``api_key`` (None when the server has no keys).

    ``timeout`` is seconds per request (connect, read and write each); ``retries`` the extra attempts a
    retryable failure gets, ``backoff`` the first pause between them (doubling). ``transport`` is passed to
    httpx (tests).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_API_URL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)
        self.retries = retries
        self.backoff = backoff
        self.cognitive = Cognitive(self)
        self.memories = Memories(self)
        self.plans = Plans(self)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # never reached the server
                failure: EngramError = ServerError(0, f"cannot reach {self._http.base_url}: {exc}")
            except (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if not idempotent:
                    raise ServerError(0, f"{method} {path}: no answer ({exc}); it may or may not have applied") from exc
                failure = ServerError(0, f"{method} {path}: no answer ({exc})")
            else:
                if response.is_success:
                    return response.json()
                failure = _error(response)
                if not (idempotent and response.status_code in RETRY_STATUS):
                    raise failure
            if attempt >= self.retries:
                raise failure
            time.sleep(self.backoff * 2**attempt)
            attempt += 1

    def ready(self) -> bool:
        """Whether the server answers ``/readyz`` with 200 (store open, embedder loaded)."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout: float = 60.0, *, interval: float = 0.2) -> None:
        """Block until :meth:`ready`; raise :class:`ServerError` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise ServerError(0, f"{self._http.base_url} not ready after {timeout} s")
            time.sleep(interval)

    # -- memories: the first names, aliases of client.memories --------------------------------------------
    def remember(self, agent_id: str, content: str, **fields: Unpack[RememberOptions]) -> RememberResponse:
        """:meth:`Memories.store`."""
        return self.memories.store(agent_id, content, **fields)

    def get(self, memory_id: str) -> MemoryOut:
        """:meth:`Memories.get`."""
        return self.memories.get(memory_id)

    def update(self, memory_id: str, *, expected_version: int, **changes: Unpack[MemoryChanges]) -> MemoryOut:
        """:meth:`Memories.update`."""
        return self.memories.update(memory_id, expected_version=expected_version, **changes)

    def delete(self, memory_id: str, *, expected_version: int) -> DeletedOut:
        """:meth:`Memories.delete`."""
        return self.memories.delete(memory_id, expected_version=expected_version)

    def recall(self, agent_id: str, query: str | None = None, **options: Any) -> list[RecallHitOut]:
        """:meth:`Memories.recall`'s hits (its ``.data``), best first."""
        return list(self.memories.recall(agent_id, query, **options).data)

    def restore(self, memory_id: str, *, expected_version: int | None = None) -> MemoryOut:
        """:meth:`Memories.restore`."""
        return self.memories.restore(memory_id, expected_version=expected_version)


class Cognitive:
    """The lifecycle side: ``client.cognitive.decay / consolidate / promote / health`` (all but health need an
    admin key), each answered with the API's ``ReportResponse``: ``pass_name``, ``agent_id`` and ``report``, the
    pass's report as the API serialises it (the client keeps no field list of its own)::

        print(client.cognitive.health("alice").report["overall_score"])
        print(admin.cognitive.decay(agent_id="alice").report["decayed_count"])
    """

    def __init__(self, client: EngramClient) -> None:
        self._client = client

    def _pass(self, agent_id: str, verb: str, method: str = "POST", **kwargs: Any) -> ReportResponse:
        path = f"/v1/agents/{_seg(agent_id)}/{verb}"
        data = self._client._call(method, path, idempotent=method == "GET", **kwargs)
        return _models().ReportResponse.model_validate(data)

    def decay(self, *, agent_id: str, confidence: bool = True) -> ReportResponse:
        """Run importance decay and (``confidence``, the default) competition-aware confidence decay now;
        ``.report`` carries ``decayed_count``, ``archived_count`` and ``pruned_count`` on top of each pass's
        report."""
        return self._pass(agent_id, "decay", json=_body(_models().DecayRequest, {"confidence": confidence}))

    def consolidate(self, *, agent_id: str, scope: Literal["recent", "full"] = "recent") -> ReportResponse:
        """Run the five-stage consolidation (episodes, beliefs, procedures, schemas, archival) now; ``.report``
        is its report (``episodes_scanned``, ``beliefs_created``, ...)."""
        return self._pass(agent_id, "consolidate", json=_body(_models().ConsolidateRequest, {"scope": scope}))

    def promote(self, *, agent_id: str) -> ReportResponse:
        """Run STM to LTM promotion now (admin key); the report as the API returns it."""
        return self._pass(agent_id, "promote")

    def health(self, agent_id: str) -> ReportResponse:
        """The agent's health (:class:`NotFound` for an agent with no memories): ``.report`` is the health
        report, with the SDK's names (``overall_score``, ``tier_distribution``, ``contradiction_count``) beside
        its own (``engram_pipeline.reporting.SDK_HEALTH_NAMES``)."""
        return self._pass(agent_id, "health", method="GET")


class Memories:
    """``client.memories.store / recall / get / update / delete / restore``, in the Engram SDK's shape.

    Answers are the API's own response models (:mod:`engram_pipeline.api.models`: ``RememberResponse``,
    ``RecallResponse``, ``MemoryOut``, ``DeletedOut``), and the options each verb takes are its request model's
    fields, so a name the API does not know is a ``TypeError`` here, before anything is sent::

        made = client.memories.store("alice", "User prefers dark mode", tags=["ui"])
        hits = client.memories.recall("alice", "which theme?", k=5).data
        client.memories.update(made.memory.id, expected_version=made.memory.version, importance=0.8)

    The models are imported on the first call (pydantic and the store's modules; not FastAPI), so that importing
    the client stays light. ``client.remember`` / ``get`` / ``update`` / ``delete`` / ``restore`` remain as
    aliases of these verbs, and ``client.recall`` answers the hits (``.data``) of :meth:`recall`.
    """

    def __init__(self, client: EngramClient) -> None:
        self._client = client

    def store(self, agent_id: str, content: str, **fields: Unpack[RememberOptions]) -> RememberResponse:
        """Store a memory; ``fields`` are ``RememberRequest``'s (``tier``, ``kind``, ``tags``, ``importance``,
        ``vector``, ...). An exact or near duplicate returns the existing row (see ``outcome``)."""
        models = _models()
        body = _body(models.RememberRequest, {"agent_id": agent_id, "content": content, **fields})
        data = self._client._call("POST", "/v1/memories", idempotent=False, json=body)
        return models.RememberResponse.model_validate(data)

    def recall(self, agent_id: str, query: str | None = None, **options: Any) -> RecallResponse:
        """The best memories of ``agent_id`` for ``query`` (or ``vector=...``), best first in ``.data``;
        ``options`` are ``RecallRequest``'s (``k``, ``include_archived``, ``tiers``, ``min_confidence``, ...)."""
        models = _models()
        body = _body(models.RecallRequest, {"agent_id": agent_id, "query": query, **options})
        data = self._client._call("POST", "/v1/memories/recall", idempotent=True, json=body)
        return models.RecallResponse.model_validate(data)

    def get(self, memory_id: str) -> MemoryOut:
        """One memory by id, whatever its status (counts as an access)."""
        data = self._client._call("GET", f"/v1/memories/{_seg(memory_id)}", idempotent=True)
        return _models().MemoryOut.model_validate(data)

    def update(self, memory_id: str, *, expected_version: int, **changes: Unpack[MemoryChanges]) -> MemoryOut:
        """Change ``UpdateRequest``'s fields if the memory is still at ``expected_version``; else
        :class:`VersionConflict` with ``current_version``."""
        models = _models()
        body = _body(models.UpdateRequest, {"expected_version": expected_version, **changes}, keep_none=True)
        data = self._client._call("PATCH", f"/v1/memories/{_seg(memory_id)}", idempotent=False, json=body)
        return models.MemoryOut.model_validate(data)

    def delete(self, memory_id: str, *, expected_version: int) -> DeletedOut:
        """Delete a memory still at ``expected_version`` (audited; :meth:`restore` brings it back)."""
        params = {"expected_version": expected_version}
        data = self._client._call("DELETE", f"/v1/memories/{_seg(memory_id)}", idempotent=False, params=params)
        return _models().DeletedOut.model_validate(data)

    def restore(self, memory_id: str, *, expected_version: int | None = None) -> MemoryOut:
        """Bring back a pruned, merged, superseded, archived or deleted memory (same id)."""
        models = _models()
        body = _body(models.RestoreRequest, {"expected_version": expected_version})
        path = f"/v1/memories/{_seg(memory_id)}/restore"
        data = self._client._call("POST", path, idempotent=False, json=body or None)
        return models.MemoryOut.model_validate(data)


class Plans:
    """The review-gated corpus merge: ``client.plans.create / list / show / apply / discard`` (admin key to
    create, apply and discard; the agent's key reads).

    ``create`` is a dry run that stores a plan and returns its report (``report["plan_id"]``, numbered clusters
    in ``report["per_cluster"]``); ``apply`` applies exactly that plan but the clusters numbered in ``reject``
    (the veto); ``discard`` closes it whole. Plans read back as ``PlanOut`` (one field per column of the plans
    table)::

        plan = admin.plans.create("alice").report["plan_id"]
        print(admin.plans.show("alice", plan).status)        # pending
        admin.plans.apply("alice", plan, reject=[2])
    """

    def __init__(self, client: EngramClient) -> None:
        self._client = client

    def _merge(self, agent_id: str, suffix: str = "", **kwargs: Any) -> Any:
        idempotent = kwargs.pop("idempotent", False)
        path = f"/v1/agents/{_seg(agent_id)}/corpus-merge{suffix}"
        return self._client._call("GET" if idempotent else "POST", path, idempotent=idempotent, **kwargs)

    def create(self, agent_id: str) -> ReportResponse:
        """Plan the agent's corpus merge (a dry run; nothing is merged); ``report["plan_id"]`` is None when
        there is nothing to merge."""
        return _models().ReportResponse.model_validate(self._merge(agent_id))

    def list(self, agent_id: str, *, status: str | None = None) -> Any:
        """The agent's plans (a ``PlanList``: ``.data`` oldest first, ``.count``), only ``status`` ones if
        given (``pending``, ``applied``, ``discarded``, ``expired``)."""
        params = {} if status is None else {"status": status}
        return _models().PlanList.model_validate(self._merge(agent_id, "/plans", idempotent=True, params=params))

    def show(self, agent_id: str, plan_id: str) -> Any:
        """One plan (a ``PlanOut``) with its ``status`` and its numbered clusters in ``body["clusters"]``."""
        data = self._merge(agent_id, f"/plans/{_seg(plan_id)}", idempotent=True)
        return _models().PlanOut.model_validate(data)

    def apply(self, agent_id: str, plan_id: str, *, reject: Sequence[int] = ()) -> ReportResponse:
        """Apply exactly the reviewed plan but its clusters numbered in ``reject`` (recorded, and not proposed
        again while their memories keep their content); a discarded or expired plan is a :class:`Conflict`."""
        models = _models()
        body = _body(models.CorpusMergeRequest, {"dry_run": False, "plan_id": plan_id, "reject": reject})
        return models.ReportResponse.model_validate(self._merge(agent_id, json=body))

    def discard(self, agent_id: str, plan_id: str) -> ReportResponse:
        """Close a pending plan whole: nothing is merged and nothing is held against its clusters."""
        data = self._merge(agent_id, f"/plans/{_seg(plan_id)}/discard")
        return _models().ReportResponse.model_validate(data)


def _models() -> ModuleType:
    """The API's models, imported when first needed (they bring the store's modules)."""
    return importlib.import_module("engram_pipeline.api.models")


def _body(model: type[BaseModel], given: Mapping[str, Any], *, keep_none: bool = False) -> dict[str, Any]:
    """``given`` as a JSON body of ``model``: a name that is not one of its fields is a ``TypeError``; None
    means "not given" (``keep_none`` sends it: an update's ``outcome=None`` clears the outcome); sequences
    become lists. The server validates the values."""
    unknown = sorted(set(given) - set(model.model_fields))
    if unknown:
        raise TypeError(f"{model.__name__} has no field {', '.join(unknown)} (it has {', '.join(model.model_fields)})")
    return {
        name: list(value) if isinstance(value, (tuple, list)) else value
        for name, value in given.items()
        if keep_none or value is not None
    }


# The first names of the answers, now the API's models: ``Memory`` is ``MemoryOut`` and so on (imported when
# first named, as the models are).
_ALIASES = {
    "Memory": "MemoryOut",
    "RememberResult": "RememberResponse",
    "RecallHit": "RecallHitOut",
    "Deleted": "DeletedOut",
}


def __getattr__(name: str) -> Any:
    if name in _ALIASES:
        return getattr(_models(), _ALIASES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _seg(value: str) -> str:
    """One path segment, percent-encoded (ids are user input)."""
    return quote(value, safe="")


__all__ = [
    "Cognitive",
    "Conflict",
    "EngramClient",
    "EngramError",
    "Forbidden",
    "InvalidRequest",
    "Memories",
    "NotFound",
    "Plans",
    "ServerError",
    "Unauthorized",
    "VersionConflict",
]
