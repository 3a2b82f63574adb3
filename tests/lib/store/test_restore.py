"""Restore is a compare-and-set: it never silently reverts a change made after the event that hid the row, and
restoring a merged member undoes what the merge wrote around it (its link, the canonical's ``merged_from``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_pipeline.lifecycle.archival import archive_faded
from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus
from engram_pipeline.model import loads_metadata
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore, NothingToRestore, RestoreConflict, VersionConflict
from engram_pipeline.store.marks import mark_superseded
from tests.lib.lifecycle.test_corpus_merge import THRESHOLDS, deploy_cluster, strip


@pytest.fixture
def store(tmp_path: Path, settings: Settings) -> MemoryStore:
    return MemoryStore.open(str(tmp_path / "store"), settings=settings.replace(**THRESHOLDS))


def unchanged(store: MemoryStore) -> tuple[int, int]:
    return store.engine.memories.version, store.engine.audit.table.count_rows()


def merged(store: MemoryStore) -> tuple[str, str, str]:
    c, m1, m2 = deploy_cluster(store)
    plan = consolidate_corpus(store, "a")
    assert apply_corpus_merge(store, "a", plan.plan_id).merged == 2
    return c, m1, m2


def test_restore_refuses_to_revert_an_edit_made_after_a_supersede(store: MemoryStore) -> None:
    old = store.remember("a", "User lives in Berlin").memory
    new = store.remember("a", "Completely different memory about tea").memory
    assert mark_superseded(store.engine, old, by=new["id"], reason="test", actor="test")  # leaves it at version 2
    edited = store.update(old["id"], expected_version=2, tags=["checked"])  # version 3, still hidden
    before = unchanged(store)
    with pytest.raises(RestoreConflict) as err:
        store.restore(old["id"])
    assert (err.value.expected, err.value.current) == (2, 3)
    assert "changed after the supersede" in str(err.value) and "(3)" in str(err.value)
    with pytest.raises(VersionConflict) as stale:
        store.restore(old["id"], expected_version=2)
    assert stale.value.current == 3
    assert unchanged(store) == before and store.get(old["id"], track_access=False) == edited
    back = store.restore(old["id"], expected_version=3)  # the caller saw version 3 and chose the pre-image
    assert strip(back) == strip(old) and back["version"] == 4


def test_restore_refuses_to_revert_an_edit_made_after_an_archive(seed_store: MemoryStore) -> None:
    store = seed_store  # confidence alone archives under the `seed` retention policy
    mid = store.remember("a", "User enjoys jazz", confidence=0.1).memory["id"]
    archive_faded(store, "a")
    hidden = store.get(mid, track_access=False)
    assert hidden["status"] == "archived"
    store.update(mid, expected_version=hidden["version"], importance=0.9)
    with pytest.raises(RestoreConflict):
        store.restore(mid)
    assert store.get(mid, track_access=False)["importance"] == 0.9


def test_restore_refuses_to_revert_an_edit_made_after_a_merge(store: MemoryStore) -> None:
    c, m1, _ = merged(store)
    hidden = store.get(m1, track_access=False)
    store.update(m1, expected_version=hidden["version"], content="Deploy runs nightly at two (checked)")
    before = unchanged(store)
    with pytest.raises(RestoreConflict):
        store.restore(m1)
    assert unchanged(store) == before
    assert store.engine.links_of([m1], rel="duplicate-of")  # nothing undone either


def test_restoring_a_merged_member_removes_its_link_and_merged_from_entry(store: MemoryStore) -> None:
    c, m1, m2 = deploy_cluster(store)
    original = store.get(m1, track_access=False)
    plan = consolidate_corpus(store, "a")
    apply_corpus_merge(store, "a", plan.plan_id)
    canonical = store.get(c, track_access=False)
    assert {e["id"] for e in loads_metadata(canonical)["merged_from"]} == {m1, m2}

    back = store.restore(m1)
    assert strip(back) == strip(original) and back["status"] == "active" and back["superseded_by"] is None
    assert not store.engine.links_of([m1], rel="duplicate-of")
    assert [(x["src_id"], x["dst_id"]) for x in store.engine.links_of([m2], rel="duplicate-of")] == [(m2, c)]
    after = store.get(c, track_access=False)
    assert [e["id"] for e in loads_metadata(after)["merged_from"]] == [m2]
    assert after["version"] == canonical["version"] + 1
    unmerge = [e for e in store.audit_events(c) if e["action"] == "unmerge"]
    assert len(unmerge) == 1 and unmerge[0]["before"] is not None  # audited with the full pre-image

    store.restore(m2)
    assert "merged_from" not in loads_metadata(store.get(c, track_access=False))
    assert not store.engine.links_for_agent("a").num_rows


def test_a_second_restore_is_refused_as_nothing_to_restore(store: MemoryStore) -> None:
    _, m1, _ = merged(store)
    store.restore(m1)
    before = unchanged(store)
    with pytest.raises(NothingToRestore, match="already restored after its merge"):
        store.restore(m1)
    assert unchanged(store) == before


def test_a_deleted_row_comes_back_without_an_expected_version(store: MemoryStore) -> None:
    row = store.remember("a", "The staging DB is on port 5433").memory
    store.delete(row["id"])
    assert store.restore(row["id"])["version"] == 2  # gone: there is no current version to compare
