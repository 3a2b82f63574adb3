"""A checked import of many lines that fold, contradict and supersede one another gives what ``remember`` of
each line in turn gives: the batched decisions (one judge call and one contradiction call per batch, the store's
neighbours from one product per agent) against the one-row path."""

from __future__ import annotations

import random

import pytest

from engram_pipeline.importer import import_jsonl
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.lib.judge.test_judge_vectorised import _claim_texts
from tests.lib.test_importer import _as_written


@pytest.mark.parametrize("policy", ["flag", "supersede"])
def test_a_busy_import_gives_what_remembering_line_by_line_gives(tmp_path, policy) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    # distinct contents: a line repeating an earlier one of its batch is that line's exact duplicate in an
    # import, where ``remember`` would fold it again into the row the first one folded into
    texts = list({t.lower(): t for t in _claim_texts(rng, 400)}.values())[:120]
    lines = [{"agent_id": rng.choice("ab"), "content": t, "tags": [rng.choice("xyz")]} for t in texts]
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}).replace(contradiction_policy=policy)
    one_by_one = MemoryStore.open(str(tmp_path / "remembered"), settings=settings)
    imported = MemoryStore.open(str(tmp_path / "imported"), settings=settings)
    for store in (one_by_one, imported):
        for agent in "ab":
            store.remember(agent, "User lives in Berlin")
    outcomes = [one_by_one.remember(x["agent_id"], x["content"], tags=x["tags"]).outcome for x in lines]
    report = import_jsonl(imported, lines, batch_size=40)
    assert _as_written(imported) == _as_written(one_by_one)
    assert report.semantic_duplicates == outcomes.count("semantic_duplicate") >= 3
    assert report.created == outcomes.count("created") and report.contradictions > 5
