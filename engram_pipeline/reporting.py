"""A pass's report as every shell shows it: the one serialiser used by Dagster metadata, the CLI, HTTP and MCP.

A pass returns a frozen report dataclass. :func:`report_fields` gives its fields as they are (for a table or
for Dagster's typed metadata), :func:`report_json` the same fields as plain JSON values (for ``--json``, the
HTTP body, an MCP result). Both word a dry run as what it *would* do: a corpus-merge plan counts the members
it would supersede in ``merged``, and shown as ``merged=4`` it reads as if four memories had been merged when
nothing was written (:func:`report_view`).

>>> report_view({"clusters": 2, "merged": 4, "dry_run": True})
{'clusters': 2, 'would_merge': 4, 'dry_run': True}
>>> report_view({"clusters": 2, "merged": 4, "dry_run": False})
{'clusters': 2, 'merged': 4, 'dry_run': False}
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Report:
...     processed: int
...     ids: frozenset[str]
>>> report_json(Report(2, frozenset({"b", "a"})))
{'processed': 2, 'ids': ['a', 'b']}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from engram_pipeline.model import CONFIDENCE_TIERS

# Counts of what a pass did, and their names when it only planned it.
DRY_RUN_NAMES = {"merged": "would_merge"}
# Confidence tiers in the order clients read them (``tier_distribution``).


def report_view(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` of a report, with counts of writes renamed to what would be written when ``dry_run`` is true."""
    if fields.get("dry_run") is not True:
        return dict(fields)
    return {DRY_RUN_NAMES.get(k, k): v for k, v in fields.items()}


def report_fields(report: Any) -> dict[str, Any]:
    """The top-level fields of a report (a dataclass, anything with ``as_dict()``, or a mapping), worded by
    :func:`report_view`; values are left as they are."""
    if hasattr(report, "as_dict"):
        fields = dict(report.as_dict())
    elif dataclasses.is_dataclass(report) and not isinstance(report, type):
        fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    elif isinstance(report, Mapping):
        fields = dict(report)
    else:
        raise TypeError(f"cannot report a {type(report).__name__}")
    return report_view(fields)


def report_json(report: Any) -> dict[str, Any]:
    """:func:`report_fields` as plain JSON values: times as ISO-8601, sets sorted, numpy values as numbers,
    nested dataclasses as objects."""
    value = json.loads(json.dumps(report_fields(report), default=json_value))
    assert isinstance(value, dict)
    return value


def json_value(value: Any) -> Any:
    """``json.dumps`` ``default`` for the values reports hold."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


# The health report's fields under the names clients of the memory server this project descends from (the Engram
# SDK) read, each the report field it repeats; ``tier_distribution`` is ``tiers`` with all four tiers. The one
# place those names are made: the HTTP API and MCP answer with them, the Python client reads them from there.
SDK_HEALTH_NAMES = {"overall_score": "score", "contradiction_count": "active_contradictions"}


def health_json(report: Any) -> dict[str, Any]:
    """The health report, plus :data:`SDK_HEALTH_NAMES` and ``tier_distribution`` (hot, warm, cold, archive);
    the report's own fields stay."""
    data = report_json(report)
    tiers = data.get("tiers") or {}
    data.update({sdk: data[name] for sdk, name in SDK_HEALTH_NAMES.items()})
    data["tier_distribution"] = {t: int(tiers.get(t, 0)) for t in CONFIDENCE_TIERS}
    return data


def decay_json(importance: Any, confidence: Any = None) -> dict[str, Any]:
    """The decay report(s), with ``decayed_count`` and ``archived_count`` on top: confidence decay's counts when
    it ran, else the rows importance decay re-scored (and 0 archived); ``pruned_count`` from importance decay."""
    imp = report_json(importance)
    if confidence is None:
        return {
            **imp,
            "decayed_count": imp.get("updated", 0),
            "archived_count": 0,
            "pruned_count": imp.get("pruned", 0),
        }
    conf = report_json(confidence)
    return {
        "importance": imp,
        "confidence": conf,
        "decayed_count": conf.get("decayed_count", 0),
        "archived_count": conf.get("archived_count", 0),
        "pruned_count": imp.get("pruned", 0),
    }
