"""How the shells (Dagster metadata, CLI, HTTP, MCP) word a pass's report: a dry run says what it *would* do.

A corpus-merge plan counts the members it would supersede in ``merged``; shown as ``merged=4`` it reads as if
four memories had been merged when nothing was written. :func:`report_view` renames such counts for dry runs.

>>> report_view({"clusters": 2, "merged": 4, "dry_run": True})
{'clusters': 2, 'would_merge': 4, 'dry_run': True}
>>> report_view({"clusters": 2, "merged": 4, "dry_run": False})
{'clusters': 2, 'merged': 4, 'dry_run': False}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Counts of what a pass did, and their names when it only planned it.
DRY_RUN_NAMES = {"merged": "would_merge"}


def report_view(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` of a report, with counts of writes renamed to what would be written when ``dry_run`` is true."""
    if fields.get("dry_run") is not True:
        return dict(fields)
    return {DRY_RUN_NAMES.get(k, k): v for k, v in fields.items()}
