"""The one visibility rule: which memories default recall and the passes see.

A memory is *visible* unless it is hidden behind another (status ``superseded``, or the durable
``superseded_by`` marker, which no pass that rewrites ``status`` ever clears) or archived. Contradicted and
stale rows stay visible. The rule is written once here and rendered three ways: as a LanceDB SQL filter
(:data:`VISIBLE_SQL`), as a row predicate (:func:`is_visible`) and as a polars expression
(:func:`visible_expr`); ``tests/lib/test_visibility.py`` proves the three agree on every status.

>>> is_visible({"status": "stale", "superseded_by": None}), is_visible({"status": "archived"})
(True, False)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

HIDDEN_STATUSES = ("superseded", "archived")

VISIBLE_SQL = f"status NOT IN ({', '.join(repr(s) for s in HIDDEN_STATUSES)}) AND superseded_by IS NULL"


def is_visible(row: Mapping[str, Any]) -> bool:
    """Whether a row (a dict with ``status`` and optionally ``superseded_by``) is visible."""
    return row.get("status") not in HIDDEN_STATUSES and row.get("superseded_by") is None


def visible_expr() -> pl.Expr:
    """The rule as a polars expression over the ``status`` and ``superseded_by`` columns."""
    return ~pl.col("status").is_in(list(HIDDEN_STATUSES)) & pl.col("superseded_by").is_null()
