"""The Prometheus text format (0.0.4), written by hand: a few lines of text that the API's ``/metrics`` and the
passes' textfiles (:mod:`engram_pipeline.pass_metrics`) both render, so neither needs a client library.

>>> sample("engram_pass_rows_scanned", 12, {"pass": "ltm_decay", "partition": 'a"b'})
'engram_pass_rows_scanned{partition="a\\\\"b",pass="ltm_decay"} 12'
"""

from __future__ import annotations

from collections.abc import Mapping

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]


def labels(key: Labels) -> str:
    """``{name="value",...}`` with the values escaped as the format asks; empty for no labels."""
    if not key:
        return ""
    escaped = (v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for _, v in key)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(key, escaped, strict=True)) + "}"


def number(value: float) -> str:
    """A sample's value: integers without a fraction, other floats exactly."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def sample(name: str, value: float, label_values: Mapping[str, str]) -> str:
    """One sample line (labels sorted by name)."""
    return f"{name}{labels(tuple(sorted(label_values.items())))} {number(value)}"
