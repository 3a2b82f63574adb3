"""Time-safety: the pipeline, run at later and later times over a dialogue corpus nobody recalls meanwhile,
keeps recall of the questions' evidence at >= 95% of what recall finds with no pass at all; and no pass ever
hides the only memory that holds a fact (a property over random corpora and times)."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from engram_pipeline.importer import import_jsonl
from engram_pipeline.invariants import check_all
from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge
from engram_pipeline.lifecycle.pipeline import run_pipeline
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.visibility import is_visible
from tests.constants import SEED_POLICY
from tests.corpora.dialogues import dialogue_corpus, evidence_recall

OFFSETS = (0, 30, 90, 365)
KS = (5, 10, 20)


def corpus_stores(tmp_path, env=None):
    corpus = dialogue_corpus(agents=2, sessions=5, turns_per_session=16)
    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **(env or {})})
    stores = []
    for name in ("untouched", "maintained"):
        store = MemoryStore.open(str(tmp_path / name), settings=settings)
        report = import_jsonl(store, corpus.turns)
        assert report.errors == ()
        stores.append(store)
    return corpus, *stores


@pytest.mark.slow
def test_recall_of_evidence_survives_a_year_of_passes(tmp_path) -> None:
    corpus, untouched, maintained = corpus_stores(tmp_path)
    agents = sorted({q.agent_id for q in corpus.questions})
    for days in OFFSETS:  # the schedules' cadence, coarsened: each run at its `now` (the passes are time-consistent)
        now = corpus.end + timedelta(days=days)
        for agent in agents:
            run_pipeline(maintained, agent, now=now)
        before = evidence_recall(untouched, corpus.questions, now=now, ks=KS)
        after = evidence_recall(maintained, corpus.questions, now=now, ks=KS)
        assert before[10] >= 0.3, before  # the corpus is answerable at all
        for k in KS:
            assert after[k] >= 0.95 * before[k], (days, k, before, after)
        for agent in agents:
            assert all(r.passed for r in check_all(maintained, agent))
    # a year on, the maintained store archived consolidated episodes and still answers from their beliefs
    archived = [r for r in maintained.list_memories(agents[0], status="archived")]
    assert all(not is_visible(r) for r in archived)


@pytest.mark.slow
def test_the_seed_policy_fails_the_same_measure(tmp_path) -> None:
    """The measure can fail: the inherited pruning, 30 days on, loses most of the evidence."""
    corpus, untouched, maintained = corpus_stores(tmp_path, SEED_POLICY)
    now = corpus.end + timedelta(days=30)
    for agent in sorted({q.agent_id for q in corpus.questions}):
        run_pipeline(maintained, agent, now=now)
    before = evidence_recall(untouched, corpus.questions, now=now, ks=KS)
    after = evidence_recall(maintained, corpus.questions, now=now, ks=KS)
    assert after[10] < 0.5 * before[10], (before, after)


T0 = datetime(2026, 1, 1, tzinfo=UTC)
FACTS = ["User lives in Berlin", "User's editor is vim", "User prefers dark mode", "User works at Acme"]
WORDINGS = ["{}", "The {}.", "{} now", "I think {}"]
row_spec = st.tuples(
    st.integers(0, len(FACTS) - 1),  # which fact
    st.integers(0, len(WORDINGS) - 1),  # which wording
    st.sampled_from(["episodic", "semantic"]),
    st.floats(0, 400),  # age in days at T0
    st.integers(0, 5),  # accesses
)


@pytest.mark.slow
@hsettings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(row_spec, min_size=1, max_size=14),
    later=st.lists(st.floats(0, 400), min_size=1, max_size=3),
    merge=st.booleans(),
)
def test_no_pass_hides_the_only_memory_holding_a_fact(rows, later, merge) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(tmp, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
        lines = [
            {
                "agent_id": "a",
                "content": WORDINGS[w].format(FACTS[f]),
                "kind": kind,
                "tier": "ltm",
                "created_at": (T0 - timedelta(days=age)).isoformat(),
                "access_count": acc,
            }
            for f, w, kind, age, acc in rows
        ]
        import_jsonl(store, lines)
        facts = {r["content"]: r["id"] for r in store.list_memories("a")}
        now = T0
        for days in sorted(later):
            now = T0 + timedelta(days=days)
            report = run_pipeline(store, "a", now=now)
            if merge and report.merge_plan.plan_id and report.merge_plan.clusters:
                apply_corpus_merge(store, "a", report.merge_plan.plan_id, now=now)
        present = {r["id"]: r for r in store.list_memories("a")}
        visible = {i for i, r in present.items() if is_visible(r)}
        links = store.engine.links_for_agent("a").to_pylist()
        holders = {}
        for lk in links:
            if lk["rel"] == "duplicate-of":
                holders.setdefault(lk["src_id"], set()).add(lk["dst_id"])
            elif lk["rel"] == "derived-from":
                holders.setdefault(lk["dst_id"], set()).add(lk["src_id"])
        for content, mid in facts.items():
            # each memory is recalled, or a row that recall shows (or shows it through) holds what it said
            if mid in visible:
                continue
            held = holders.get(mid, set())
            assert held & set(present), (content, mid, present.get(mid))
        assert all(r.passed for r in check_all(store, "a"))
