"""What the write path's tests share: a store with the test thresholds, and a write as a batch holds it."""

from __future__ import annotations

from pathlib import Path

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.write import batch as write_batch
from tests.vectors import THRESHOLDS


def open_store(tmp_path: Path, settings: Settings) -> MemoryStore:
    return MemoryStore.open(str(tmp_path / "store"), settings=settings.replace(**THRESHOLDS))


def row(store: MemoryStore, content: str, vector: list[float], agent: str = "a") -> write_batch.Item:
    r = store.engine.new_row(agent, content)
    r["vector"] = vector
    return (r, "test")
