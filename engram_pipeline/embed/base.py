"""The ``Embedder`` protocol, its errors, and the threshold profiles shipped with each embedder.

An embedder turns texts into L2-normalised float32 rows. Each shipped embedder carries a threshold profile
(``profiles/<kind>.json``) calibrated on the STS pairs by ``bench/calibrate_thresholds.py``; apply it with
``settings.with_profile(embedder.profile)`` so that an explicitly set variable still wins.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from engram_pipeline.settings import PROFILE_FIELDS


class EmbedderError(RuntimeError):
    """An embedder could not produce vectors (endpoint failure, wrong dimension, bad response)."""


class EmbedderUnavailable(EmbedderError):
    """The embedder's optional packages or model files are not installed; the message says what to install."""


@runtime_checkable
class Embedder(Protocol):
    """What the store and the write path need from an embedder.

    ``name`` and ``dimension`` are recorded in the store, which refuses to open with a different embedder.
    ``embed`` returns float32 rows of length ``dimension``, each of unit L2 norm (a zero row only for an
    empty text). ``profile`` holds the calibrated thresholds, keyed exactly by ``PROFILE_FIELDS``.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    @property
    def profile(self) -> dict[str, float]: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def load_profile_document(kind: str) -> dict[str, Any]:
    """The whole calibration record of ``profiles/<kind>.json`` (thresholds plus how they were measured)."""
    path = resources.files("engram_pipeline.embed").joinpath("profiles", f"{kind}.json")
    try:
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EmbedderError(f"no threshold profile shipped for embedder {kind!r} (profiles/{kind}.json)") from None
    return doc


def load_profile(kind: str) -> dict[str, float]:
    """The four calibrated thresholds of embedder ``kind`` ("hashing", "minilm", "openai")."""
    thresholds = load_profile_document(kind)["thresholds"]
    missing = set(PROFILE_FIELDS) - set(thresholds)
    if missing:
        raise EmbedderError(f"profiles/{kind}.json lacks {', '.join(sorted(missing))}")
    return {k: float(thresholds[k]) for k in PROFILE_FIELDS}


class CalibratedProfile:
    """Mixin for the shipped embedders: ``profile`` is the calibration in ``profiles/<kind>.json``."""

    kind: ClassVar[str]

    @property
    def profile(self) -> dict[str, float]:
        return dict(_cached_profile(self.kind))


@functools.cache
def _cached_profile(kind: str) -> dict[str, float]:
    return load_profile(kind)


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm, as float32; zero rows stay zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
