"""A client for any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (Ollama, vLLM, TEI, hosted).

Texts go in batches; the response's vectors are put back in request order by their ``index``, checked
against ``ENGRAM_OPENAI_DIM`` and L2-normalised (not every server normalises). Empty texts are not sent
(most servers refuse them) and get a zero row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from engram_pipeline.embed.base import CalibratedProfile, EmbedderError, l2_normalise

BATCH_SIZE = 128


class OpenAIEmbedder(CalibratedProfile):
    """Embeddings from an OpenAI-compatible endpoint; ``name`` is ``openai-<model>``."""

    kind = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dim: int,
        api_key: str = "",
        batch_size: int = BATCH_SIZE,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._dim = dim
        self._batch_size = batch_size
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=timeout_s, transport=transport)

    @property
    def name(self) -> str:
        return f"openai-{self._model}"

    @property
    def dimension(self) -> int:
        return self._dim

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        keep = [i for i, t in enumerate(texts) if t.strip()]
        for start in range(0, len(keep), self._batch_size):
            batch = keep[start : start + self._batch_size]
            out[batch] = self._request([texts[i] for i in batch])
        return l2_normalise(out)

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            response = self._client.post(self._url, json={"model": self._model, "input": texts})
        except httpx.HTTPError as exc:
            raise EmbedderError(
                f"embedding endpoint {self._url} unreachable ({type(exc).__name__}: {exc}); "
                "check ENGRAM_OPENAI_BASE_URL"
            ) from exc
        if response.status_code != 200:
            hint = " (check ENGRAM_OPENAI_API_KEY)" if response.status_code in (401, 403) else ""
            raise EmbedderError(
                f"embedding endpoint {self._url} answered HTTP {response.status_code}{hint}: {response.text[:300]}"
            )
        try:
            data: list[dict[str, Any]] = response.json()["data"]
            rows = sorted(data, key=lambda item: int(item.get("index", 0)))
            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(f"embedding endpoint {self._url} sent an unexpected body: {exc!r}") from exc
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise EmbedderError(
                f"embedding endpoint {self._url} returned {vectors.shape[0] if vectors.ndim else 0} vectors "
                f"for {len(texts)} texts"
            )
        if vectors.shape[1] != self._dim:
            raise EmbedderError(
                f"model {self._model!r} returned {vectors.shape[1]}-dimensional vectors but "
                f"ENGRAM_OPENAI_DIM={self._dim}; set ENGRAM_OPENAI_DIM={vectors.shape[1]} for a new store"
            )
        return vectors
