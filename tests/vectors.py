"""Hand-made vectors at exact cosines, and the thresholds the write-time tests set, defined once for the
tests of ``remember``'s checks (``tests/lib/store/write/``: ``test_write_time``, ``test_batch``,
``test_collapse``, ``test_group_commit``, ``test_write_cache``): they control similarity exactly
(``remember(..., vector=...)``) instead of depending on what the hashing embedder makes of a sentence."""

from __future__ import annotations

import numpy as np

# Explicit thresholds, so a test's cosines decide the same way under any embedder profile.
THRESHOLDS = dict(
    duplicate_threshold=0.97, merge_threshold=0.85, contradiction_threshold=0.8, contradiction_threshold_max=0.97
)
DIM = 384  # the hashing embedder's dimension, which the stores of these tests have


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def at_cosine(base: np.ndarray, cosine: float, seed: int = 1) -> list[float]:
    """A unit vector whose cosine with unit ``base`` is exactly ``cosine`` (up to float32)."""
    w = np.random.default_rng(seed).normal(size=base.shape)
    w = unit(w - (w @ base) * base)
    return [float(x) for x in unit(cosine * base + np.sqrt(1 - cosine**2) * w)]
