"""The memory API: an app factory, its lifespan, and the mapping of store errors to HTTP answers.

>>> from engram_pipeline.settings import Settings, SettingsError
>>> app = create_app(settings=Settings(embedder="hashing", db_uri="memory://"))
>>> sorted(p for p in app.openapi()["paths"] if p.startswith("/v1/memories"))[:2]
['/v1/memories', '/v1/memories/recall']

Run it with :func:`serve` (``engram serve``), or ``python -m engram_pipeline.api --port 8080``, or
``uvicorn engram_pipeline.api.app:app_from_env --factory``.
"""

from __future__ import annotations

import errno
import logging
import socket
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from threadpoolctl import threadpool_limits

from engram_pipeline.api.access import AccessRecorder
from engram_pipeline.api.auth import KeyRing, check_bind
from engram_pipeline.api.deps import ApiState
from engram_pipeline.api.docs import add_offline_docs
from engram_pipeline.api.metrics import Metrics, MetricsMiddleware
from engram_pipeline.api.metrics import router as metrics_router
from engram_pipeline.api.routes import agents, memories, probes
from engram_pipeline.settings import Settings, SettingsError
from engram_pipeline.store import (
    InvalidInput,
    MemoryNotFound,
    MemoryStore,
    NothingToRestore,
    PlanClosed,
    PlanNotFound,
    UnknownAgent,
    VersionConflict,
)

log = logging.getLogger(__name__)
TITLE = "Engram memory API"


def create_app(
    store: MemoryStore | None = None, settings: Settings | None = None, *, access_interval_s: float = 1.0
) -> FastAPI:
    """The FastAPI app over ``store`` (opened from ``settings`` at startup when not given).

    ``access_interval_s`` is how often the reads collected are appended to the access log (0: inline).
    """
    if settings is None:
        settings = store.settings if store is not None else Settings.from_env()
    keys = KeyRing.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state: ApiState | None = getattr(app.state, "engram", None)
        if state is None:
            opened = MemoryStore.open(settings=settings)
            state = ApiState(opened, settings, keys, AccessRecorder(opened, interval_s=access_interval_s))
            app.state.engram = state
        # Load the embedder in the background: uvicorn accepts connections once the lifespan has started, so
        # the server answers at once (/healthz, and the routes that embed nothing) while the model loads, in
        # seconds for MiniLM; a request that embeds waits for the load (once per process, under a lock), and
        # /readyz answers 200 once it is done. A failure (an unreachable embedding endpoint) leaves the server
        # up but not ready; /readyz retries the warm-up.
        threading.Thread(target=_warm_up, args=(state,), name="engram-warm-up", daemon=True).start()
        state.access.start()
        # One BLAS thread while serving: the write path's matrix products are small (a batch of rows against an
        # agent's), and after each one OpenBLAS's idle worker spins for a while waiting for more, which held a
        # core the requests needed (16 HTTP clients: 5.3 against 3.1 ms of server CPU per remember).
        blas = threadpool_limits(limits=1, user_api="blas")
        try:
            yield
        finally:
            blas.restore_original_limits()
            state.access.stop()

    app = FastAPI(
        title=TITLE,
        version="1",
        description="Remember, recall and maintain AI-agent memories. Bearer API keys are scoped to agent ids.",
        lifespan=lifespan,
        docs_url=None,  # served by add_offline_docs, without a CDN
        redoc_url=None,
    )
    add_offline_docs(app, title=TITLE)
    if store is not None:  # usable without the lifespan too (e.g. an ASGI test client that skips it)
        app.state.engram = ApiState(store, settings, keys, AccessRecorder(store, interval_s=access_interval_s))
    app.include_router(memories.router)
    app.include_router(agents.router)
    app.include_router(probes.router)
    app.state.metrics = Metrics()
    app.include_router(metrics_router)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    _add_error_handlers(app)
    return app


def _error(status: int, detail: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"detail": detail, **extra}, status_code=status)


def _add_error_handlers(app: FastAPI) -> None:
    # Errors answered with a status and their own message, nothing else: one table, one handler.
    plain: tuple[tuple[type[Exception], int], ...] = (
        (InvalidInput, 422),
        (MemoryNotFound, 404),
        (PlanNotFound, 404),
        (PlanClosed, 409),
        (UnknownAgent, 404),
        (NothingToRestore, 409),
    )
    for error, status in plain:
        app.add_exception_handler(error, _plain_handler(status))

    @app.exception_handler(VersionConflict)
    async def conflict(_: Request, exc: VersionConflict) -> JSONResponse:
        if exc.current is None:
            return _error(404, f"memory {exc.memory_id!r} no longer exists")
        return _error(409, str(exc), current_version=exc.current)

    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_plain_error(e) for e in exc.errors()]
        detail = "; ".join(f"{e['loc']}: {e['msg']}" if e["loc"] else e["msg"] for e in errors)
        return _error(422, detail or "invalid request", errors=errors)


def _plain_handler(status: int) -> Any:
    async def handler(_: Request, exc: Exception) -> JSONResponse:
        return _error(status, str(exc))

    return handler


def _plain_error(error: Any) -> dict[str, Any]:
    """One pydantic error as JSON-safe text (inputs are left out: they can be huge or unserialisable)."""
    loc = [str(p) for p in error.get("loc", ()) if p not in ("body",)]
    msg = str(error.get("msg", "invalid"))
    if error.get("type") == "json_invalid":
        msg = f"malformed JSON: {error.get('ctx', {}).get('error', 'cannot parse the body')}"
        loc = []
    elif error.get("type") == "extra_forbidden":
        msg = "unknown field"
    return {"loc": ".".join(loc), "msg": msg, "type": str(error.get("type", ""))}


def _warm_up(state: ApiState) -> None:
    try:
        state.warm_up()
    except Exception as exc:
        log.warning("engram: warm-up failed, not ready yet: %s", exc)


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory``: settings from the environment."""
    return create_app(settings=Settings.from_env())


def serve(host: str, port: int, settings: Settings, *, log_level: str = "info", access_interval_s: float = 1.0) -> None:
    """Serve the API with uvicorn (blocking). Refuses a non-loopback ``host`` when no API keys are set.

    Raises ``SettingsError`` with a message for the user on a refused bind or a malformed key list.
    ``access_interval_s`` is the flush interval of access bookkeeping (0: one access-log append per request).
    """
    import uvicorn

    keys = KeyRing.from_settings(settings)
    check_bind(host, keys)
    # Bound before the app starts: the lifespan loads the embedder (seconds for MiniLM), and a port in use
    # must be the first thing reported, not the last. uvicorn listens on it once the lifespan is done.
    sock = bind_port(host, port)
    if not keys.enabled:
        print(
            f"engram: no API keys configured; serving loopback callers on {host}:{port} without authentication",
            file=sys.stderr,
        )
    app = create_app(settings=settings, access_interval_s=access_interval_s)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # what uvicorn says itself when it binds the port (here it was bound before)
                url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
                logging.getLogger("uvicorn.error").info("Uvicorn running on %s (Press CTRL+C to quit)", url)

    server = Server(uvicorn.Config(app, host=host, port=port, log_level=log_level))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    if not server.started:  # the lifespan failed: uvicorn logged why
        raise SystemExit(3)


def bind_port(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not listening yet). Raises ``SettingsError`` when the port is taken
    or the address cannot be used, naming it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart may bind over TIME_WAIT, as uvicorn does
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = (
            "the port is in use (another server?); choose another with --port" if exc.errno == errno.EADDRINUSE else exc
        )
        raise SettingsError(f"cannot listen on {host}:{port}: {why}") from None
    return sock
