"""The similarity bands the passes act on, defined once from the settings and applied as a scalar or a filter.

A band is a half-open cosine interval ``[low, high)`` (``high`` None: no upper bound). The merge band starts
at ``merge_threshold`` and has no upper bound (a pair at or above the duplicate threshold is a duplicate,
which merges too). The contradiction bands are ``[contradiction_threshold, contradiction_threshold_max)``
plus everything at or above ``duplicate_threshold``: such a pair is still visible side by side only because
a veto kept it apart, and a contradiction there must be recorded like any other.

>>> from engram_pipeline.settings import Settings
>>> s = Settings(contradiction_threshold=0.5, contradiction_threshold_max=0.9, duplicate_threshold=0.95)
>>> contradiction_bands(s)
((0.5, 0.9), (0.95, None))
>>> [in_bands(x, contradiction_bands(s)) for x in (0.49, 0.5, 0.92, 0.97)]
[False, True, False, True]
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.settings import Settings

Band = tuple[float, float | None]


def merge_band(settings: Settings) -> tuple[Band, ...]:
    return ((settings.merge_threshold, None),)


def contradiction_bands(settings: Settings) -> tuple[Band, ...]:
    lo, hi = settings.contradiction_threshold, settings.contradiction_threshold_max
    return ((lo, hi if hi < 1.0 else None), (settings.duplicate_threshold, None))


def in_bands(similarity: float, bands: tuple[Band, ...]) -> bool:
    return any(similarity >= lo and (hi is None or similarity < hi) for lo, hi in bands)


def filter_bands(pairs: pa.Table, bands: tuple[Band, ...], column: str = "score") -> pa.Table:
    """The rows of ``pairs`` whose ``column`` falls in any of the bands (the same rule as :func:`in_bands`)."""
    mask = None
    for lo, hi in bands:
        m = pc.greater_equal(pairs[column], lo)
        if hi is not None:
            m = pc.and_(m, pc.less(pairs[column], hi))
        mask = m if mask is None else pc.or_(mask, m)
    return pairs.filter(mask) if mask is not None else pairs.slice(0, 0)
