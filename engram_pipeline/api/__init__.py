"""The memory API: HTTP (FastAPI) and MCP (stdio) shells over :class:`~engram_pipeline.store.MemoryStore`.

Entry points for the CLI: :func:`serve` (``engram serve``) and :func:`run_mcp` (``engram mcp``).

The app (FastAPI, the ``api`` extra) is imported when one of its names is first used, not with this package:
the request and response models (:mod:`engram_pipeline.api.models`, pydantic only) are what the Python client
answers with, and a client-only install has no FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engram_pipeline.api.app import app_from_env, create_app, serve
    from engram_pipeline.settings import Settings

__all__ = ["app_from_env", "create_app", "run_mcp", "serve"]
APP_NAMES = ("app_from_env", "create_app", "serve")


def __getattr__(name: str) -> Any:
    if name in APP_NAMES:
        from engram_pipeline.api import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_mcp(agent_id: str, settings: Settings, *, admin: bool = False) -> None:
    """Serve the MCP tools for ``agent_id`` over stdio (blocking); see :mod:`engram_pipeline.api.mcp_server`.

    ``admin`` lets ``consolidate_corpus`` apply a reviewed merge plan (by its id)."""
    from engram_pipeline.api.mcp_server import run_mcp as _run

    _run(agent_id, settings, admin=admin)
