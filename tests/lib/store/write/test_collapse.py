"""A near-duplicate write collapses into its stored row (``store/write/collapse.py``): a batch's collapses are
one compare-and-set, a row edited meanwhile is folded into as it now is, a failure reaches only the writers it
folds, and a write whose row is deleted mid-batch is written as new."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest

from engram_pipeline.model import Memory, loads_metadata
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.errors import VersionConflict
from engram_pipeline.store.results import RememberResult
from engram_pipeline.store.write import batch as write_batch
from engram_pipeline.store.write import collapse as write_collapse
from tests.lib.store.write.batches import open_store, row
from tests.vectors import DIM, at_cosine, unit


def test_a_collapse_reinforces_a_real_zero_confidence_from_zero(tmp_path: Path, settings: Settings) -> None:
    from engram_pipeline.scoring import reinforce

    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    first = store.remember("a", "Deploys run every night at two", vector=base.tolist(), confidence=0.0).memory
    again = store.remember("a", "Every night at two the deploy runs", vector=at_cosine(base, 0.98))
    assert again.outcome == "semantic_duplicate" and again.memory["id"] == first["id"]
    assert again.memory["confidence"] == pytest.approx(reinforce(0.0))  # was reinforce(0.5)


def test_near_duplicates_of_stored_rows_in_one_batch_collapse_in_one_commit(tmp_path: Path, settings: Settings) -> None:
    """A batch's collapses are one compare-and-set (one each serialised concurrent writers whose writes all
    collapsed), with the outcomes, scores and rows that the same writes one after another give."""
    store = open_store(tmp_path, settings)
    bases = [unit(np.random.default_rng(10 + k).normal(size=DIM)) for k in range(4)]
    stored = [
        store.remember("a", f"stored fact {k}: the queue drains at night", vector=b.tolist()).memory["id"]
        for k, b in enumerate(bases)
    ]
    shutil.copytree(tmp_path / "store", tmp_path / "copy")
    twin = MemoryStore.open(str(tmp_path / "copy"), settings=store.settings)
    items = [
        row(store, f"near duplicate {k}: at night the queue drains", at_cosine(b, 0.98, seed=k))
        for k, b in enumerate(bases)
    ]
    items.append(row(store, "near duplicate 0 again: the queue drains at night", at_cosine(bases[0], 0.985, seed=7)))
    # the content of item 1 again: nothing of it is stored, so it folds again, as a later write would
    items.append(row(store, "NEAR duplicate 1:  at night the queue drains", items[1][0]["vector"]))
    table = store.engine.shard_for("a").memories
    before = table.version
    batch = write_batch.remember_batch(store.engine, items)
    assert table.version == before + 1
    one_by_one = [write_batch.remember_batch(twin.engine, [copy.deepcopy(item)])[0] for item in items]
    assert told(batch) == told(one_by_one)
    assert [(outcome, memory_id) for outcome, memory_id, _ in told(batch)] == [
        ("semantic_duplicate", stored[k]) for k in (0, 1, 2, 3, 0, 1)
    ]
    assert folds(store) == folds(twin)
    assert [count for _, count, *_ in folds(store)] == [2 if i in stored[:2] else 1 for i in sorted(stored)]
    last = batch[4]  # the last write into row 0: told the row as its collapse left it
    assert isinstance(last, RememberResult) and last.memory == store.get(stored[0], track_access=False)


def told(results: list[RememberResult | BaseException]) -> list[tuple[str, str, float]]:
    """What each writer was told: outcome, row id, score (to 6 places, as a duplicate match records it: a
    multi-vector product and a single one round float32 differently)."""
    out = []
    for r in results:
        assert isinstance(r, RememberResult) and r.score is not None
        out.append((r.outcome, r.memory["id"], round(r.score, 6)))
    return out


def folds(store: MemoryStore) -> list[tuple[object, ...]]:
    """Per row of agent ``a`` (by id): what collapses change, and each duplicate match but its time."""
    out = []
    for r in sorted(store.list_memories("a"), key=lambda r: r["id"]):
        matches = [(m["match_id"], m["content"], m["score"]) for m in loads_metadata(r).get("duplicate_matches", [])]
        out.append((r["id"], r["reinforcement_count"], r["confidence"], r["tags"], matches))
    return out


def test_a_failed_collapse_reaches_only_the_writers_it_folds(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, settings)
    bases = [unit(np.random.default_rng(10 + k).normal(size=DIM)) for k in range(2)]
    for k, b in enumerate(bases):
        store.remember("a", f"stored fact {k}: the queue drains at night", vector=b.tolist())

    def boom(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(store.engine, "cas_write", boom)
    fresh = unit(np.random.default_rng(99).normal(size=DIM)).tolist()
    items = [
        row(store, "near duplicate 0: at night the queue drains", at_cosine(bases[0], 0.98)),
        row(store, "An unrelated fact about lunch", fresh),
        row(store, "near duplicate 1: at night the queue drains", at_cosine(bases[1], 0.98)),
    ]
    first, created, second = write_batch.remember_batch(store.engine, items)
    assert isinstance(first, RuntimeError) and isinstance(second, RuntimeError)
    assert not isinstance(created, BaseException) and created.outcome == "created"
    assert all(r["reinforcement_count"] == 0 for r in store.list_memories("a"))


def test_a_collapse_into_a_row_edited_since_its_check_folds_into_the_edit(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    stored = store.remember("a", "Deploys run every night at two", vector=base.tolist()).memory
    real, edited = store.engine.cas_write, []

    def edit_first(*args: object, **kwargs: object) -> object:
        if kwargs.get("action") == "dedup" and not edited:  # a concurrent edit lands between read and commit
            edited.append(store.update(stored["id"], expected_version=stored["version"], pinned=True))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store.engine, "cas_write", edit_first)
    (told,) = write_batch.remember_batch(
        store.engine, [row(store, "Every night at two the deploy runs", at_cosine(base, 0.98))]
    )
    assert not isinstance(told, BaseException) and told.outcome == "semantic_duplicate" and edited
    assert told.memory == store.get(stored["id"], track_access=False)
    assert told.memory["pinned"] and told.memory["reinforcement_count"] == 1  # the retry folded into the edit
    assert told.memory["version"] == stored["version"] + 2


def edited_while_folding(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch, *, edits: int
) -> tuple[MemoryStore, Memory, RememberResult | BaseException, int]:
    """A near-duplicate write of a stored row that another process edits right before each of the collapse's
    commits (before its compare-and-set and again after each re-read), ``edits`` times at most; what the
    writer was told, and how many edits landed."""
    store = open_store(tmp_path, settings)
    there = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    stored = store.remember("a", "Deploys run every night at two", vector=base.tolist()).memory
    real_cas, real_get, landed = store.engine.cas_write, store.engine.get_many, []

    def edit() -> None:
        if len(landed) < edits:
            now = there.get(stored["id"], track_access=False)
            landed.append(there.update(stored["id"], expected_version=now["version"], tags=[f"edit-{len(landed)}"]))

    def cas_write(*args: object, **kwargs: object) -> object:
        if kwargs.get("action") != "dedup":
            return real_cas(*args, **kwargs)  # type: ignore[arg-type]
        edit()
        monkeypatch.setattr(store.engine, "get_many", get_many)
        try:
            return real_cas(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            monkeypatch.setattr(store.engine, "get_many", real_get)

    def get_many(*args: object, **kwargs: object) -> object:
        found = real_get(*args, **kwargs)  # type: ignore[arg-type]
        edit()  # after the compare-and-set's re-read, before its retry
        return found

    monkeypatch.setattr(store.engine, "cas_write", cas_write)
    (told,) = write_batch.remember_batch(
        store.engine, [row(store, "Every night at two the deploy runs", at_cosine(base, 0.98))]
    )
    return store, stored, told, len(landed)


def test_a_collapse_folds_into_a_row_edited_through_its_first_round(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, stored, told, landed = edited_while_folding(tmp_path, settings, monkeypatch, edits=2)
    assert landed == 2 and not isinstance(told, BaseException) and told.outcome == "semantic_duplicate"
    now = store.get(stored["id"], track_access=False)
    assert now["reinforcement_count"] == 1 and now["version"] == stored["version"] + 3  # two edits, one fold
    assert "edit-1" in now["tags"]


def test_a_collapse_into_a_row_edited_through_every_round_tells_its_writer(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not acknowledged as folded when it was not: the writer hears the conflict and may write again."""
    store, stored, told, landed = edited_while_folding(tmp_path, settings, monkeypatch, edits=100)
    assert landed == 2 * write_collapse.COLLAPSE_ROUNDS
    assert isinstance(told, VersionConflict) and told.memory_id == stored["id"]
    assert store.get(stored["id"], track_access=False)["reinforcement_count"] == 0


@pytest.mark.parametrize("when", ["before its read", "before its fold"])
def test_a_write_whose_fold_target_is_deleted_mid_batch_is_written_as_new(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Issue 35: the writer was told its memory does not exist (HTTP 404) and nothing was stored."""
    store = open_store(tmp_path, settings)
    there = open_store(tmp_path, settings)  # another process's handle, which deletes the row
    base = unit(np.random.default_rng(0).normal(size=DIM))
    stored = store.remember("a", "Deploys run every night at two", vector=base.tolist()).memory
    deleted: list[str] = []

    def delete_once() -> None:
        if not deleted:
            there.delete(stored["id"])
            deleted.append(stored["id"])

    if when == "before its read":  # between the batch's checks and the read of the rows it folds into
        real_read = write_collapse.rows_by_id

        def rows_by_id(*args: object, **kwargs: object) -> object:
            delete_once()
            return real_read(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(write_collapse, "rows_by_id", rows_by_id)
    else:  # between that read and the fold's compare-and-set
        real_cas = store.engine.cas_write

        def cas_write(*args: object, **kwargs: object) -> object:
            if kwargs.get("action") == "dedup":
                delete_once()
            return real_cas(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store.engine, "cas_write", cas_write)
    other = unit(np.random.default_rng(1).normal(size=DIM)).tolist()
    items = [
        row(store, "The VPN profile expires in June", other),
        row(store, "Every night at two the deploy runs", at_cosine(base, 0.98)),
    ]
    first, told = write_batch.remember_batch(store.engine, items)
    assert deleted == [stored["id"]]
    assert not isinstance(first, BaseException) and first.outcome == "created"
    assert not isinstance(told, BaseException), told  # was MemoryNotFound
    assert told.outcome == "created" and told.memory["id"] == items[1][0]["id"]
    assert sorted(r["content"] for r in store.list_memories("a")) == [
        "Every night at two the deploy runs",
        "The VPN profile expires in June",
    ]
