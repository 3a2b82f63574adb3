"""Recall ranks on the information score the retention policy reads: chit-chat never outranks a fact that
answers a real query, and the penalty leaves facts' order alone."""

from __future__ import annotations

import tempfile

import pytest

from engram_pipeline.importer import import_jsonl
from engram_pipeline.information import information_of
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.recall import noise_share
from tests.corpora.dialogues import dialogue_corpus, evidence_recall, ranked_ids


def test_small_talk_sharing_the_query_words_ranks_below_the_fact(store: MemoryStore) -> None:
    fact = store.remember("a", "Dana: I'm allergic to peanuts.").memory
    chat = store.remember("a", "Dana: haha peanuts, thanks!").memory
    assert information_of([chat["content"]])[0] < store.settings.noise_threshold
    hits = store.recall("a", "haha peanuts", k=2, track_access=False)
    assert [h.memory["id"] for h in hits] == [fact["id"], chat["id"]]
    assert hits[1].similarity > hits[0].similarity  # closer to the query, and still below the fact


def test_the_penalty_is_zero_for_facts_and_full_for_a_row_that_says_nothing() -> None:
    rows = [
        {"content": "User lives in Berlin"},
        {"content": "ok"},
        {"content": "x", "importance_factors": '{"information": 0.0}'},
    ]
    share = noise_share(rows, 0.3)
    assert share[0] == 0.0 and 0.9 < share[1] <= 1.0 and share[2] == 1.0


@pytest.mark.slow
def test_on_the_dialogue_corpus_no_chit_chat_ranks_above_the_evidence() -> None:
    corpus = dialogue_corpus(agents=3, sessions=6, turns_per_session=30)
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing"})
    info = dict(zip((t["id"] for t in corpus.turns), information_of([t["content"] for t in corpus.turns]), strict=True))
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(tmp, settings=settings)
        import_jsonl(store, corpus.turns)
        above = 0
        for q in corpus.questions:
            ids = ranked_ids(store.recall(q.agent_id, q.text, k=20, now=corpus.end, track_access=False))
            first = next((i for i, x in enumerate(ids) if x in q.evidence), len(ids))
            above += any(info.get(x, 1.0) < settings.noise_threshold for x in ids[:first])
        assert above == 0
        ranked = evidence_recall(store, corpus.questions, now=corpus.end)
        flat = evidence_recall(
            MemoryStore.open(tmp, settings=settings.replace(recall_weight_noise=0.0)), corpus.questions, now=corpus.end
        )
        assert ranked[10] >= flat[10] and ranked[20] >= flat[20], (ranked, flat)
