"""``/healthz`` (liveness) and ``/readyz`` (readiness) for load balancers and orchestrators; no API key.

``/healthz`` answers 200 while the process serves requests. ``/readyz`` answers 200 only when a recall would
be fast (the store is open and the embedder loaded), 503 before, with what is missing.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from engram_pipeline.api.deps import ApiState

router = APIRouter(tags=["probes"])


class ProbeOut(BaseModel):
    status: str
    detail: str | None = None


@router.get("/healthz", response_model=ProbeOut)
def healthz() -> ProbeOut:
    """Liveness: the process answers."""
    return ProbeOut(status="ok")


@router.get("/readyz", response_model=ProbeOut, responses={503: {"model": ProbeOut, "description": "not ready"}})
def readyz(request: Request) -> ProbeOut | JSONResponse:
    """Readiness: the store is open and the embedder loaded (a warm-up that failed at start is retried here)."""
    state: ApiState | None = getattr(request.app.state, "engram", None)
    if state is None:
        return _not_ready("the memory store is not open")
    if not state.ready:
        try:
            state.warm_up()
        except Exception as exc:
            return _not_ready(f"the embedder is not loaded: {exc}")
    return ProbeOut(status="ready")


def _not_ready(detail: str) -> JSONResponse:
    return JSONResponse(ProbeOut(status="not ready", detail=detail).model_dump(), status_code=503)
