"""Embedders and their calibrated threshold profiles.

>>> from engram_pipeline.settings import Settings
>>> embedder = get_embedder(Settings(embedder="hashing"))
>>> embedder.name, embedder.dimension
('hashing-384', 384)
>>> settings = Settings(embedder="hashing").with_profile(embedder.profile)  # explicit variables still win
"""

from __future__ import annotations

from engram_pipeline.embed.base import (
    Embedder,
    EmbedderError,
    EmbedderUnavailable,
    l2_normalise,
    load_profile,
    load_profile_document,
)
from engram_pipeline.embed.hashing import HashingEmbedder
from engram_pipeline.settings import Settings, SettingsError

EMBEDDERS = ("hashing", "minilm", "openai")

__all__ = [
    "EMBEDDERS",
    "Embedder",
    "EmbedderError",
    "EmbedderUnavailable",
    "HashingEmbedder",
    "embedder_settings",
    "get_embedder",
    "l2_normalise",
    "load_profile",
    "load_profile_document",
    "threshold_table",
]


def get_embedder(settings: Settings) -> Embedder:
    """The embedder named by ``ENGRAM_EMBEDDER`` ("hashing" | "minilm" | "openai"), configured from settings.

    Raises ``SettingsError`` for an unknown name and ``EmbedderUnavailable`` when minilm's optional
    packages are not installed.
    """
    kind = settings.embedder.strip().lower()
    if kind == "hashing":
        return HashingEmbedder(dim=settings.hashing_dim)
    if kind == "minilm":
        from engram_pipeline.embed.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    if kind == "openai":
        from engram_pipeline.embed.openai import OpenAIEmbedder

        return OpenAIEmbedder(
            base_url=settings.openai_base_url,
            model=settings.openai_model,
            dim=settings.openai_dim,
            api_key=settings.openai_api_key,
        )
    raise SettingsError(
        f"ENGRAM_EMBEDDER={settings.embedder!r}: unknown embedder; choose one of {', '.join(EMBEDDERS)}"
    )


def embedder_settings(name: str, dimension: int) -> str | None:
    """The variables that select the embedder a store recorded as ``name`` (its ``Embedder.name``) and
    ``dimension``, as the user sets them; None for a name no shipped embedder gives.

    >>> embedder_settings("all-MiniLM-L6-v2", 384)
    'ENGRAM_EMBEDDER=minilm'
    >>> embedder_settings("hashing-64", 64)
    'ENGRAM_EMBEDDER=hashing ENGRAM_HASHING_DIM=64'
    >>> embedder_settings("openai-text-embedding-3-small", 1536)
    'ENGRAM_EMBEDDER=openai ENGRAM_OPENAI_MODEL=text-embedding-3-small ENGRAM_OPENAI_DIM=1536'
    """
    from engram_pipeline.embed.minilm import MODEL_NAME

    if name == MODEL_NAME:
        return "ENGRAM_EMBEDDER=minilm"
    if (dim := name.removeprefix("hashing-")) != name and dim == str(dimension):
        return "ENGRAM_EMBEDDER=hashing" + (
            "" if dimension == Settings.hashing_dim else f" ENGRAM_HASHING_DIM={dimension}"
        )
    if (model := name.removeprefix("openai-")) != name and model:
        return f"ENGRAM_EMBEDDER=openai ENGRAM_OPENAI_MODEL={model} ENGRAM_OPENAI_DIM={dimension}"
    return None


def threshold_table() -> str:
    """The README's threshold table, generated from the shipped profiles (tests/docs checks the README has it).

    >>> threshold_table().splitlines()[0]
    '| profile | duplicate | merge band from | contradiction band | calibration |'
    """
    lines = ["| profile | duplicate | merge band from | contradiction band | calibration |", "|---|---|---|---|---|"]
    for kind in ("minilm", "hashing", "openai"):
        doc = load_profile_document(kind)
        t = load_profile(kind)
        calibrated = "calibrated_by" in doc
        source = "STS 2014-2015, held out 2016" if calibrated else "not calibrated here: docs/design.md's defaults"
        band = f"[{t['contradiction_threshold']:g}, {t['contradiction_threshold_max']:g})"
        lines.append(f"| {kind} | {t['duplicate_threshold']:g} | {t['merge_threshold']:g} | {band} | {source} |")
    return "\n".join(lines)
