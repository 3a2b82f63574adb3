"""The rules for input, in one place: every boundary (library verbs, import lines, API bodies, MCP arguments,
CLI options) calls these before anything is written, and each refusal is an :class:`InvalidInput` whose
message starts with the field it names.

Ranges are chosen so that nothing downstream can overflow: versions and counters stay far below ``int64``
(after any ``+ 1``), times and time-to-lives keep ``created_at + ttl`` a valid timestamp, numbers are finite,
and text carries no NUL or unpaired surrogate (neither can be stored or placed in a filter). Ids exclude ``/``
and control characters, so that every id a store holds can be named in an HTTP path and a filter.

>>> check_id("id", "a/b")
Traceback (most recent call last):
...
engram_pipeline.store.errors.InvalidInput: id must not contain '/' or control characters; got 'a/b'
>>> check_unit("importance", float("nan"))
Traceback (most recent call last):
...
engram_pipeline.store.errors.InvalidInput: importance must be within [0, 1] (a finite number); got nan
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from engram_pipeline.store.errors import InvalidInput

C = TypeVar("C", bound=str)

MAX_ID_CHARS = 200
MAX_TAG_CHARS = 200
MAX_TAGS = 100
# The one pattern of an id (also what the API's path and body models use): no control characters (NUL
# cannot be quoted into a filter) and no "/" (it could not be named in an HTTP path).
ID_PATTERN = r"^[^\x00-\x1f\x7f/]+$"
_ID = re.compile(ID_PATTERN)
# Versions and counters: exact in a JSON double (2**53) and far from int64 overflow after an increment.
MAX_VERSION = 2**53
MAX_COUNT = 2**53
MAX_TTL_S = 10 * 365 * 86_400
# Times a memory may carry: after the epoch, and early enough that adding any TTL stays a valid timestamp.
MIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(2500, 1, 1, tzinfo=UTC)
MAX_METADATA_DEPTH = 32


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_text(name: str, value: Any, *, max_bytes: int | None = None) -> str:
    """A non-blank string without NUL or unpaired surrogates (at most ``max_bytes`` bytes of UTF-8)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} must be a non-empty string")
    size = len(check_plain_string(name, value).encode())
    if max_bytes is not None and size > max_bytes:
        raise InvalidInput(f"{name} is {size} bytes; the limit is {max_bytes}")
    return value


def check_id(name: str, value: Any) -> str:
    """A memory or agent id: 1 to ``MAX_ID_CHARS`` characters, not blank, no ``/`` or control characters."""
    check_text(name, value)
    if len(value) > MAX_ID_CHARS:
        raise InvalidInput(f"{name} is {len(value)} characters; the limit is {MAX_ID_CHARS}")
    if not _ID.match(value):
        raise InvalidInput(f"{name} must not contain '/' or control characters; got {_show(value)}")
    return str(value)


def check_ids(name: str, values: Any) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidInput(f"{name} must be a list of ids")
    return [check_id(f"{name}[{i}]", v) for i, v in enumerate(values)]


def check_tags(values: Any, *, name: str = "tags") -> list[str]:
    """A list of at most ``MAX_TAGS`` tags, each a short string without control characters."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidInput(f"{name} must be a list of strings")
    if len(values) > MAX_TAGS:
        raise InvalidInput(f"{name} has {len(values)} tags; the limit is {MAX_TAGS}")
    for i, tag in enumerate(values):
        check_text(f"{name}[{i}]", tag)
        if len(tag) > MAX_TAG_CHARS or re.search(r"[\x00-\x1f\x7f]", tag):
            raise InvalidInput(f"{name}[{i}] must be at most {MAX_TAG_CHARS} characters, no control characters")
    return list(values)


def check_choice(name: str, value: Any, allowed: Sequence[C]) -> C:
    """``value`` if it is one of ``allowed``, typed as their type (a ``Literal``'s values give that ``Literal``)."""
    for choice in allowed:
        if isinstance(value, str) and value == choice:
            return choice
    raise InvalidInput(f"{name} must be one of {', '.join(allowed)}; got {_show(value)}")


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise InvalidInput(f"{name} must be true or false; got {_show(value)}")
    return bool(value)


def check_int(name: str, value: Any, *, low: int, high: int) -> int:
    """An integer (not a bool) within [low, high]."""
    span = f"{low}..{'2**53' if high == 2**53 else high}"
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise InvalidInput(f"{name} must be an integer within {span}; got {_show(value)}")
    if not low <= int(value) <= high:
        raise InvalidInput(f"{name} must be within {span}; got {value}")
    return int(value)


def check_version(name: str, value: Any) -> int:
    return check_int(name, value, low=1, high=MAX_VERSION)


def check_count(name: str, value: Any) -> int:
    return check_int(name, value, low=0, high=MAX_COUNT)


def check_unit(name: str, value: Any) -> float:
    """A finite number (not a bool) within [0, 1]."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidInput(f"{name} must be a number within [0, 1]; got {_show(value)}")
    number = float(value)
    if not (math.isfinite(number) and 0.0 <= number <= 1.0):
        raise InvalidInput(f"{name} must be within [0, 1] (a finite number); got {number}")
    return number


def check_ttl(value: Any) -> int:
    return check_int("ttl_s", value, low=1, high=MAX_TTL_S)


def check_time(name: str, value: Any) -> datetime:
    """A datetime (naive means UTC) between ``MIN_TIME`` and ``MAX_TIME``, returned in UTC."""
    if not isinstance(value, datetime):
        raise InvalidInput(f"{name} must be a time; got {_show(value)}")
    try:
        ts = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:  # year 9999 with a negative offset: beyond datetime in UTC
        ts = MAX_TIME
    if not MIN_TIME <= ts < MAX_TIME:
        raise InvalidInput(f"{name} must be between {MIN_TIME:%Y-%m-%d} and {MAX_TIME:%Y-%m-%d}; got {value}")
    return ts


def check_metadata(value: Any, *, name: str = "metadata") -> dict[str, Any]:
    """A JSON object: string keys, finite numbers, strings without NUL or surrogates, bounded nesting."""
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{name} must be a JSON object")
    _check_json(name, value, 0)
    return dict(value)


def _check_json(path: str, value: Any, depth: int) -> None:
    if depth > MAX_METADATA_DEPTH:
        raise InvalidInput(f"{path} is nested deeper than {MAX_METADATA_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > MAX_COUNT:
            raise InvalidInput(f"{path} is an integer out of range (at most 2**53 in magnitude); got {value}")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"{path} must be a finite number (NaN and infinity are not JSON); got {value}")
    elif isinstance(value, str):
        check_plain_string(path, value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"{path} keys must be strings; got {_show(key)}")
            check_plain_string(f"{path} key {_show(key)}", key)
            _check_json(f"{path}.{key}", item, depth + 1)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json(f"{path}[{i}]", item, depth + 1)
    else:
        raise InvalidInput(f"{path} must be a JSON value; got {type(value).__name__}")


def check_plain_string(path: str, value: str) -> str:
    """Storable text: no NUL, no unpaired surrogate (JSON can carry "\\ud800"; UTF-8 cannot)."""
    if "\x00" in value:
        raise InvalidInput(f"{path} must not contain a NUL character")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidInput(f"{path} contains an unpaired surrogate; send valid Unicode") from None
    return value


def check_vector(value: Any, dimension: int, *, name: str = "vector") -> list[float]:
    """``dimension`` finite float32 components, not all zero (a zero vector has no direction: it would
    never be recalled nor compared)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
        raise InvalidInput(f"{name} must be a list of numbers")
    if any(isinstance(x, bool | np.bool_) for x in value):
        raise InvalidInput(f"{name} must be a list of numbers, not true/false")
    try:
        with np.errstate(over="ignore"):  # an out-of-range component becomes inf and is refused below
            arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be a list of numbers") from None
    if arr.shape != (dimension,):
        raise InvalidInput(f"{name} has dimension {arr.size}; this store uses {dimension}")
    if not np.isfinite(arr).all():
        raise InvalidInput(f"{name} contains NaN or infinite values (or values beyond float32)")
    if not np.any(arr):
        raise InvalidInput(f"{name} is all zeros; a zero vector has no direction and can never be recalled")
    return list(arr.tolist())


def check_k(value: Any, *, high: int) -> int:
    return check_int("k", value, low=1, high=high)
