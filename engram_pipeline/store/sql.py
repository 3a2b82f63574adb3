"""Quoting for values placed into LanceDB (DataFusion SQL) filters.

Every value that reaches a ``where`` string goes through :func:`lit` or :func:`in_list`: agent ids, tags and
memory ids are user input. A string literal doubles its single quotes; nothing else is special inside one
(backslashes, ``%`` and ``_`` are literal there, since we only compare with ``=`` and ``IN``).

>>> lit("o'brien")
"'o''brien'"
>>> in_list(["a", "b'"])
"('a', 'b''')"
"""

from __future__ import annotations

from collections.abc import Iterable


def lit(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if not isinstance(value, str):
        raise TypeError(f"cannot place a {type(value).__name__} into a filter")
    if "\x00" in value:
        raise ValueError("a NUL character cannot be used in a filter value")
    return "'" + value.replace("'", "''") + "'"


def in_list(values: Iterable[str]) -> str:
    items = [lit(v) for v in values]
    if not items:
        raise ValueError("an IN list needs at least one value")
    return "(" + ", ".join(items) + ")"


def eq(column: str, value: str | int | float | bool) -> str:
    return f"{column} = {lit(value)}"
