"""The write path's appends and version checks (``store/appends.py``): the latest version without listing the
table while nothing else committed, by listing once something did, and appends that land as LanceDB's do."""

from __future__ import annotations

import hashlib
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore, appends, one_trip
from engram_pipeline.store.appends import _naming
from engram_pipeline.store.core import ShardedEngine
from engram_pipeline.store.shards import CREATED_AT
from engram_pipeline.store.write import compaction as sc
from tests.vectors import THRESHOLDS


def stores(tmp_path: Path, settings: Settings) -> tuple[MemoryStore, MemoryStore]:
    """Two stores on one directory: what two processes see."""
    s = settings.replace(**THRESHOLDS)
    uri = str(tmp_path / "store")
    return MemoryStore.open(uri, settings=s), MemoryStore.open(uri, settings=s)


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the versions read by listing the table (LanceDB's version call)."""
    seen: list[int] = []
    version = one_trip.version

    async def counted(table: object) -> int:
        seen.append(1)
        return await version(table)

    monkeypatch.setattr(appends.one_trip, "version", counted)
    return seen


def test_the_latest_version_is_found_by_looking_for_the_next_manifests_never_by_listing(
    tmp_path: Path, settings: Settings, listings: list[int]
) -> None:
    here, there = stores(tmp_path, settings)
    here.remember("a", "the first fact")
    shard = here.engine.shards[0]
    assert shard.appends.latest() == shard.memories.version
    for i in range(5):
        here.remember("a", f"another fact {i}")
        assert shard.appends.latest() == shard.memories.version
    there.remember("a", "a fact from the other process")
    assert shard.appends.latest() == shard.memories.version
    there.maintain()  # compactions, index builds: several commits of another store
    assert shard.appends.latest() == shard.memories.version
    made = here.remember("a", "Written after the other process's commits")
    assert made.outcome == "created"
    assert shard.appends.latest() == shard.memories.version
    assert not listings  # each next version's manifest was looked for (a stat), the directory never listed


def test_appends_land_as_lancedbs_do_with_each_rows_created_version(tmp_path: Path, settings: Settings) -> None:
    here, there = stores(tmp_path, settings)
    first = here.remember("a", "the first fact").memory
    there.remember("a", "the other process's fact")  # our held dataset is now behind: the append rebases
    second = here.remember("a", "the second fact").memory
    rows = {r["id"]: r for r in here.engine.scan("a", columns=["id", "content", CREATED_AT]).to_pylist()}
    assert rows[first["id"]]["content"] == "the first fact"
    assert rows[second["id"]]["content"] == "the second fact"
    assert rows[second["id"]][CREATED_AT] == here.engine.memories.version  # stable row ids: Lance keeps the version
    assert len(rows) == 3


def test_a_table_without_a_lance_dataset_appends_through_lancedb(settings: Settings) -> None:
    store = MemoryStore.open("memory://", settings=settings.replace(**THRESHOLDS))
    store.remember("a", "the first fact")
    store.remember("a", "the second fact")
    assert store.engine.shards[0].appends.latest() == store.engine.memories.version
    assert store.count("a") == 2


@pytest.mark.parametrize("v2", [True, False], ids=["v2-names", "v1-names"])
def test_the_next_manifest_is_named_as_lance_names_it(tmp_path: Path, v2: bool) -> None:
    """Both of Lance's manifest naming schemes: the path for the next version exists once Lance commits it."""
    uri = str(tmp_path / "t.lance")
    data = pa.table({"x": [1]})
    dataset = lance.write_dataset(data, uri, enable_v2_manifest_paths=v2)
    name = _naming(dataset)
    assert name is not None and Path(name(dataset.version)).exists()
    assert not Path(name(dataset.version + 1)).exists()
    dataset.insert(data)
    assert Path(name(dataset.version)).exists() and not Path(name(dataset.version + 1)).exists()


def test_a_failed_append_opens_the_dataset_again(tmp_path: Path, settings: Settings) -> None:
    store, _ = stores(tmp_path, settings)
    store.remember("a", "the first fact")
    held = store.engine.shards[0].appends
    with pytest.raises(Exception, match="(?i)schema|field|column"):
        held.append(pa.table({"not_a_column": [1]}))
    assert held._dataset is None  # the next use opens the table's latest version
    assert store.remember("a", "the second fact").outcome == "created"
    assert held.latest() == store.engine.memories.version


def test_the_stores_own_compactions_are_passed_over_without_a_read(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction's commits change no row: they are recorded as such, and the next write neither brings its
    views up to date by a read nor looks again for a racing insert; another process's commit still is read."""
    monkeypatch.setattr(sc, "MAX_FRAGMENTS", 4)
    monkeypatch.setattr(sc, "CHECK_EVERY", 1)
    monkeypatch.setattr(sc, "INDEX_ROWS", 1)
    here, there = stores(tmp_path, settings)
    here.remember("a", "the first fact")
    here.maintain()
    races: list[int] = []
    drop = ShardedEngine._drop_lost_races
    monkeypatch.setattr(ShardedEngine, "_drop_lost_races", lambda self, rows: races.append(1) or drop(self, rows))
    shard = here.engine.shards[0]
    passed = 0
    for i in range(12):
        here.remember("a", f"fact {hashlib.sha1(str(i).encode()).hexdigest()[:12]} of the release train")
        written = here.engine.write_cache._views[0]["a"].at  # the append's commit: the view moved there with it
        sc.wait_idle(here.engine, 60)
        after = shard.appends.latest()
        if after > written and shard.appends.unchanged(written, after):  # a compaction and an index step came
            passed += 1
            refreshes = here.engine.write_cache.refreshes
            assert here.remember("a", f"one more fact after compaction {i}").outcome == "created"
            assert here.engine.write_cache.refreshes == refreshes  # no catch-up read
    assert passed >= 2 and not races
    there.remember("a", "a fact from the other process")
    refreshes = here.engine.write_cache.refreshes
    assert here.remember("a", "a fact written after it").outcome == "created"
    assert here.engine.write_cache.refreshes == refreshes + 1
    assert here.remember("a", "A fact from the other  process").outcome == "exact_duplicate"
