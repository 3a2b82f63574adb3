"""Retrying LanceDB's retryable commit conflicts: every commit of the store goes through :func:`with_retry`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def with_retry(op: Callable[[], Any], attempts: int = 8) -> Any:
    """Run a commit, retrying LanceDB's retryable commit conflicts with a short backoff."""
    for n in range(attempts):
        try:
            return op()
        except Exception as exc:  # lancedb raises plain RuntimeError/OSError for commit conflicts
            if not is_retryable_conflict(exc) or n == attempts - 1:
                raise
            time.sleep(0.01 * 2**n)
    raise AssertionError("unreachable")


def is_retryable_conflict(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("commit conflict", "retryable", "conflict", "concurrent"))
