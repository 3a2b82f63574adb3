"""The store is opened once per process, not once per run (issue 38: on S3 an open cost about 1.5 s per shard,
and a Celery worker builds the resources afresh for every run it executes): a second run with a fresh resource
reuses the open store, and a store whose layout changed since (a re-shard) is never handed out again."""

from __future__ import annotations

from typing import Any

import pytest
from dagster import DagsterInstance, materialize

from assets.maintenance_assets import stm_promotion
from assets.resources import _SHARED, EngramStore, RunScopedIOManager, shared_store
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.errors import ShardCountMismatch
from engram_pipeline.store.migrate import migrate


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The URIs of every ``MemoryStore.open`` from here on."""
    seen: list[str | None] = []
    real = MemoryStore.open

    def counting(uri: str | None = None, **kwargs: Any) -> MemoryStore:
        seen.append(uri)
        return real(uri, **kwargs)

    monkeypatch.setattr(MemoryStore, "open", staticmethod(counting))
    return seen


def run(uri: str, agent: str, instance: DagsterInstance, tmp_path: Any) -> Any:
    """One run of ``stm_promotion`` with resources built afresh, as a Celery worker builds them for each run."""
    resources = {
        "engram": EngramStore(uri=uri, embedder="hashing"),
        "run_scoped_io_manager": RunScopedIOManager(base_dir=str(tmp_path / "io")),
    }
    return materialize([stm_promotion], partition_key=agent, resources=resources, instance=instance)


def test_a_second_run_in_the_same_process_does_not_reopen_the_store(
    seeded: MemoryStore, seeded_uri: str, instance: DagsterInstance, opens: list[str | None], tmp_path: Any
) -> None:
    first, second = seeded.agents()[:2]
    assert run(seeded_uri, first, instance, tmp_path).success
    assert run(seeded_uri, second, instance, tmp_path).success
    assert run(seeded_uri, first, instance, tmp_path).success
    assert opens == [seeded_uri]  # three runs, one open
    kept = EngramStore(uri=seeded_uri, embedder="hashing").settings()  # the runs' settings, as the environment sets
    assert shared_store(seeded_uri, kept) is shared_store(seeded_uri, kept) and opens == [seeded_uri]
    other = kept.replace(duplicate_threshold=0.99)
    assert shared_store(seeded_uri, other) is not shared_store(seeded_uri, kept)
    assert opens == [seeded_uri, seeded_uri]  # other settings: another store object


def test_a_kept_store_is_not_handed_out_after_a_reshard(seeded_uri: str, opens: list[str | None]) -> None:
    settings = Settings().replace(embedder="hashing")
    kept = shared_store(seeded_uri, settings)
    assert shared_store(seeded_uri, settings) is kept and opens == [seeded_uri]
    migrate(seeded_uri, shards=2, settings=settings)
    opens.clear()  # the migration opens the store itself
    # The kept store was laid out for one shard: writing through it would go to tables the migration dropped.
    # The next run opens afresh, and this process (ENGRAM_SHARDS unset: 1) is refused with the reason.
    with pytest.raises(ShardCountMismatch):
        shared_store(seeded_uri, settings)
    assert opens == [seeded_uri] and kept not in _SHARED.values()  # opened afresh, the kept one dropped
