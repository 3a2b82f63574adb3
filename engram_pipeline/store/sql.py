"""Quoting for values placed into LanceDB (DataFusion SQL) filters.

Every value that reaches a ``where`` string goes through :func:`lit` or :func:`in_list`: agent ids, tags and
memory ids are user input. A string literal doubles its single quotes; nothing else is special inside one
(backslashes, ``%`` and ``_`` are literal there, since we only compare with ``=`` and ``IN``).

>>> lit("o'brien")
"'o''brien'"
>>> in_list(["a", "b'"])
"('a', 'b''')"

A long list of values is read in several queries of at most :data:`IN_CHUNK` values each (:func:`where_in`).

>>> where_in("id", ["a", "b", "c"], chunk=2)
["id IN ('a', 'b')", "id IN ('c')"]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from engram_pipeline.store.errors import InvalidInput


def lit(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if not isinstance(value, str):
        raise TypeError(f"cannot place a {type(value).__name__} into a filter")
    if "\x00" in value:
        # No stored id, agent id or tag holds one (store/validation.py refuses them), so nothing can match.
        raise InvalidInput(f"a NUL character cannot be used in a filter value; got {value[:80]!r}")
    return "'" + value.replace("'", "''") + "'"


def in_list(values: Iterable[str]) -> str:
    items = [lit(v) for v in values]
    if not items:
        raise ValueError("an IN list needs at least one value")
    return "(" + ", ".join(items) + ")"


IN_CHUNK = 1000
"""The most values one ``IN (...)`` list of a read holds (a filter of 1,000 quoted ids stays short to parse)."""

T = TypeVar("T")


def chunked(values: Sequence[T], chunk: int | None = None) -> list[Sequence[T]]:
    """``values`` in consecutive slices of at most ``chunk`` (default :data:`IN_CHUNK`, read at the call, so a
    test can make it small); none for no values."""
    size = chunk or IN_CHUNK
    return [values[i : i + size] for i in range(0, len(values), size)]


def where_in(column: str, values: Sequence[str], *, chunk: int | None = None) -> list[str]:
    """``column IN (...)`` conditions that together cover ``values``, one per query (none for no values)."""
    return [f"{column} IN {in_list(part)}" for part in chunked(values, chunk)]


def eq(column: str, value: str | int | float | bool) -> str:
    return f"{column} = {lit(value)}"


def at_versions(expected: Mapping[str, int]) -> str:
    """Rows whose ``id`` is a key of ``expected`` and whose ``version`` is its value. One clause per distinct
    version, not per row: a filter over thousands of rows stays short, and the ``IN`` lists use the id index.

    >>> at_versions({"a": 1, "b": 1, "c": 2})
    "(version = 1 AND id IN ('a', 'b')) OR (version = 2 AND id IN ('c'))"
    """
    by_version: dict[int, list[str]] = {}
    for memory_id, version in expected.items():
        by_version.setdefault(int(version), []).append(memory_id)
    if not by_version:
        raise ValueError("at_versions needs at least one row")
    return " OR ".join(f"(version = {v} AND id IN {in_list(ids)})" for v, ids in sorted(by_version.items()))
