"""A batch decides as writes one after another would (``store/write/batch.py``): identical rows in one batch
make one row, a near duplicate or a contradiction of a row earlier in the same batch is seen, and every writer
is told the row that stayed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store.write import batch as write_batch
from tests.lib.store.write.batches import open_store, row
from tests.vectors import DIM, at_cosine, unit


def test_identical_rows_in_one_batch_make_one_row(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM)).tolist()
    items = [row(store, "The deploy key rotates monthly", base), row(store, "the DEPLOY key rotates  monthly", base)]
    first, second = write_batch.remember_batch(store.engine, items)
    assert not isinstance(first, BaseException) and not isinstance(second, BaseException)
    assert (first.outcome, second.outcome) == ("created", "exact_duplicate")
    assert second.memory["id"] == first.memory["id"]
    assert [r["id"] for r in store.list_memories("a")] == [first.memory["id"]]


def test_a_near_duplicate_of_an_earlier_row_of_the_batch_collapses_into_it(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    other = unit(np.random.default_rng(5).normal(size=DIM)).tolist()
    items = [
        row(store, "Deploys run every night at two", base.tolist()),
        row(store, "An unrelated fact about lunch", other),
        row(store, "Every night at two the deploy runs", at_cosine(base, 0.98)),
    ]
    results = write_batch.remember_batch(store.engine, items)
    assert not any(isinstance(r, BaseException) for r in results)
    a, b, c = results
    assert (a.outcome, b.outcome, c.outcome) == ("created", "created", "semantic_duplicate")  # type: ignore[union-attr]
    assert c.memory["id"] == a.memory["id"] and c.memory["reinforcement_count"] == 1  # type: ignore[union-attr]
    assert len(store.list_memories("a")) == 2


def test_a_contradiction_within_one_batch_is_flagged(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    old, new = write_batch.remember_batch(
        store.engine,
        [row(store, "User lives in Berlin", base.tolist()), row(store, "User lives in Munich", at_cosine(base, 0.9))],
    )
    assert not isinstance(old, BaseException) and not isinstance(new, BaseException)
    assert new.outcome == "created" and [c["memory_id"] for c in new.contradictions] == [old.memory["id"]]
    assert store.get(old.memory["id"], track_access=False)["status"] == "contradicted"


def test_a_batch_embeds_its_rows_in_one_call_and_a_refused_text_fails_its_write_only(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, settings)
    calls: list[list[str]] = []
    embed = store.engine.embed

    def refusing(texts: object) -> np.ndarray:
        texts = list(texts)  # type: ignore[call-overload]
        calls.append(texts)
        if any("refused" in t for t in texts):
            raise ValueError("the embedder refused a text")
        return embed(texts)

    monkeypatch.setattr(store.engine, "embed", refusing)
    given = unit(np.random.default_rng(3).normal(size=DIM)).tolist()
    items = [
        (store.engine.new_row("a", text), "test") for text in ("Deploys run at two", "A lunch fact", "Tea at four")
    ]
    items[2][0]["vector"] = given  # a given vector is not embedded
    first, second, third = write_batch.remember_batch(store.engine, items)
    assert calls == [["Deploys run at two", "A lunch fact"]]
    assert [r.outcome for r in (first, second, third)] == ["created"] * 3  # type: ignore[union-attr]
    assert np.allclose(third.memory["vector"], given)  # type: ignore[union-attr]

    calls.clear()
    items = [
        (store.engine.new_row("a", text), "test") for text in ("The build is green", "this is refused", "Cats nap")
    ]
    ok, refused, also = write_batch.remember_batch(store.engine, items)
    assert calls[0] == ["The build is green", "this is refused", "Cats nap"] and len(calls) == 4  # then one by one
    assert isinstance(refused, ValueError)
    assert not isinstance(ok, BaseException) and not isinstance(also, BaseException)
    assert {r["content"] for r in store.list_memories("a")} == {
        "Deploys run at two",
        "A lunch fact",
        "Tea at four",
        "The build is green",
        "Cats nap",
    }
