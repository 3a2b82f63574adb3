"""Lifecycle passes as the API shells call them: imported lazily, reports turned into plain JSON.

The passes live in ``engram_pipeline.lifecycle``; the API starts without them, and a pass that is not
installed is a :class:`PassUnavailable` (HTTP 501, an MCP tool error) that says so.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from datetime import date, datetime
from typing import Any

from engram_pipeline.reporting import report_view


class PassUnavailable(Exception):
    """A lifecycle pass is not available in this installation."""


def lifecycle(module: str, name: str) -> Any:
    """``engram_pipeline.lifecycle.<module>.<name>``."""
    try:
        return getattr(importlib.import_module(f"engram_pipeline.lifecycle.{module}"), name)
    except (ImportError, AttributeError):
        raise PassUnavailable(f"the {module} pass ({name}) is not available in this installation") from None


def as_json(report: Any) -> dict[str, Any]:
    """A report (frozen dataclass, or an object with ``as_dict``) as plain JSON values; a dry run's counts
    say what it would do (``would_merge``, see :mod:`engram_pipeline.reporting`)."""
    if hasattr(report, "as_dict"):
        data = report.as_dict()
    elif dataclasses.is_dataclass(report) and not isinstance(report, type):
        data = dataclasses.asdict(report)
    else:
        data = dict(report)
    return report_view(json.loads(json.dumps(data, default=_default)))


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)
