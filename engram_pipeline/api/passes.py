"""Lifecycle passes as the API shells call them: imported lazily, reports turned into plain JSON by
:mod:`engram_pipeline.reporting`.

The passes live in ``engram_pipeline.lifecycle``; the API starts without them, and a pass that is not
installed is a :class:`PassUnavailable` (HTTP 501, an MCP tool error) that says so.
"""

from __future__ import annotations

import importlib
from typing import Any

from engram_pipeline.reporting import decay_json, health_json, report_json


class PassUnavailable(Exception):
    """A lifecycle pass is not available in this installation."""


def lifecycle(module: str, name: str) -> Any:
    """``engram_pipeline.lifecycle.<module>.<name>``."""
    try:
        return getattr(importlib.import_module(f"engram_pipeline.lifecycle.{module}"), name)
    except (ImportError, AttributeError):
        raise PassUnavailable(f"the {module} pass ({name}) is not available in this installation") from None


# The one report serialiser (engram_pipeline.reporting), under the names the routes and tools import.
as_json = report_json
__all__ = ["PassUnavailable", "as_json", "decay_json", "health_json", "lifecycle"]
