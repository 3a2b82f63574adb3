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

from engram_pipeline.model import CONFIDENCE_TIERS
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


def health_json(report: Any) -> dict[str, Any]:
    """The health report, plus the names clients of the memory server this project descends from read:
    ``overall_score``, ``tier_distribution`` (hot, warm, cold, archive), ``contradiction_count`` (the existing
    fields stay)."""
    data = as_json(report)
    tiers = data.get("tiers") or {}
    data["overall_score"] = data.get("score")
    data["tier_distribution"] = {t: int(tiers.get(t, 0)) for t in CONFIDENCE_TIERS}
    data["contradiction_count"] = data.get("active_contradictions", 0)
    return data


def decay_json(importance: Any, confidence: Any = None) -> dict[str, Any]:
    """The decay report(s), with ``decayed_count`` and ``archived_count`` on top: confidence decay's counts when
    it ran, else the rows importance decay re-scored (and 0 archived); ``pruned_count`` from importance decay."""
    imp = as_json(importance)
    if confidence is None:
        return {
            **imp,
            "decayed_count": imp.get("updated", 0),
            "archived_count": 0,
            "pruned_count": imp.get("pruned", 0),
        }
    conf = as_json(confidence)
    return {
        "importance": imp,
        "confidence": conf,
        "decayed_count": conf.get("decayed_count", 0),
        "archived_count": conf.get("archived_count", 0),
        "pruned_count": imp.get("pruned", 0),
    }
