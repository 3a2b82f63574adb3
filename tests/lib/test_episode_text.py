"""Claims, beliefs and procedures from episode text as agents write it: speakers, reported speech, context
prefixes, hedges, tense and changes of mind, logged fixes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram_pipeline.claims import detect_contradiction, parse_claims, same_value
from engram_pipeline.lifecycle.consolidation import consolidate
from engram_pipeline.lifecycle.procedures import text_outcome, trigger_action
from engram_pipeline.store import MemoryStore
from engram_pipeline.utterances import listeners

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def claims(text: str) -> list[tuple[str, str, str, bool]]:
    return [(c.subject, c.relation, c.value, c.negated) for c in parse_claims(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I prefer dark mode", [("user", "prefers", "dark mode", False)]),
        ("my editor is vim", [("editor", "is", "vim", False)]),
        ("Kim: I prefer dark mode", [("kim", "prefers", "dark mode", False)]),
        ("Kim: my editor is vim", [("kim's editor", "is", "vim", False)]),
        ("Caroline: I'm allergic to peanuts", [("caroline", "is", "allergic to peanuts", False)]),
        ("Kim said she prefers dark mode in every editor", [("kim", "prefers", "dark mode in every editor", False)]),
        ("The user mentioned that they live in Lisbon", [("user", "lives_in", "lisbon", False)]),
        ("Ravi told me he's a nurse", [("ravi", "is", "nurse", False)]),
        ('Kim said: "I use emacs"', [("kim", "uses", "emacs", False)]),
        ("Session 3: Kim said she prefers tea", [("kim", "prefers", "tea", False)]),
        ("[2023-05-08] Kim: I live in Osaka", [("kim", "lives_in", "osaka", False)]),
        ("2023-05-08 14:02 - I work at Acme", [("user", "works_at", "acme", False)]),
        ("Kim: I no longer use vim", [("kim", "uses", "vim", True)]),
        ("Kim: I don't like jazz", [("kim", "likes", "jazz", True)]),
        ("Kim: I switched from vim to emacs", [("kim", "uses", "emacs", False), ("kim", "uses", "vim", True)]),
        ("I moved to Lisbon last year", [("user", "lives_in", "lisbon last year", False)]),
        # no claim: a pronoun nobody reported, a question, small talk
        ("Kim: she prefers tea", []),
        ("Kim: do you prefer tea?", []),
        ("Kim: Haha, that sounds fun!", []),
        # a report the rewriting did not resolve: no claim about "kim said you"
        ("Kim said you live in Lisbon", []),
        ("Kim mentioned that Sam lives in Porto", []),
        ("Dana: You told me you love hiking.", []),
        ("The shared drive is on the NAS", [("shared drive", "is", "on nas", False)]),  # not a report
        # a plain copular fact is not a speaker turn
        ("Editor: vim", [("editor", "is", "vim", False)]),
    ],
)
def test_claims_from_episode_text(text: str, expected: list[tuple[str, str, str, bool]]) -> None:
    assert claims(text) == expected


@pytest.mark.parametrize(
    ("text", "listener", "expected"),
    [
        # reported speech inside a turn: about the person reported, resolved from the speaker's "my"
        ("Dana: My sister told me she lives in Graz.", None, [("dana's sister", "lives_in", "graz", False)]),
        ("Dana: my brother said he hates olives.", None, [("dana's brother", "likes", "olives", True)]),
        ("Leo: Dana told me she works at Globex.", None, [("dana", "works_at", "globex", False)]),
        # "you" is the other speaker of a two-person conversation, when the turn's listener is known
        ("Leo: You still work at Globex.", "Dana", [("dana", "works_at", "globex", False)]),
        ("Leo: You use Strava, I remember.", "Dana", [("dana", "uses", "strava", False)]),
        ("Leo: Your sister lives in Graz.", "Dana", [("dana's sister", "lives_in", "graz", False)]),
        ("Leo: You still work at Globex.", None, []),  # nobody to say who "you" is
        ("You still work at Globex.", "Dana", []),  # not a turn: whose "you", the text does not say
        ("Leo: You work at Globex, right?", "Dana", []),  # a question asserts nothing
        # a wish or a piece of advice, in a turn, is not what is
        ("Leo: You should live in Lisbon.", "Dana", []),
        ("Dana: I could work at Globex.", "Leo", []),
    ],
)
def test_reported_speech_and_the_second_person_in_dialogue_turns(
    text: str, listener: str | None, expected: list[tuple[str, str, str, bool]]
) -> None:
    assert [(c.subject, c.relation, c.value, c.negated) for c in parse_claims(text, listener)] == expected


def test_you_is_the_other_speaker_only_in_a_two_person_conversation() -> None:
    two = ["Dana: Hi Leo!", "Leo: You still live in Lisbon.", "a note without a speaker", "Dana: Bye!"]
    assert listeners(two) == ["Leo", "Dana", None, "Leo"]
    assert listeners([*two, "Sam: I am here too."]) == [None] * 5  # three speakers: "you" is anyone
    assert listeners(["Dana: I live in Lisbon.", "Dana: I still do."]) == [None, None]  # a monologue
    # a speaker is never their own listener
    assert parse_claims("Dana: You live in Lisbon.", "Dana") == []


def test_hedges_tense_and_changes_are_kept_on_the_claim() -> None:
    [hedged] = parse_claims("Kim: I think I prefer tea")
    assert hedged.hedged and (hedged.subject, hedged.value) == ("kim", "tea")
    [past] = parse_claims("Kim: I used to live in Berlin")
    assert past.past and (past.relation, past.value) == ("lives_in", "berlin")
    new, old = parse_claims("Kim: I switched from coffee to green tea")
    assert new.changed and old.changed and old.negated


@pytest.mark.parametrize(
    ("a", "b", "rule"),
    [
        ("Kim: I live in Berlin", "Kim: I live in Munich", "value_swap"),
        ("Kim: I used to live in Berlin", "Kim: I live in Munich", None),  # the past is no contradiction
        ("Kim said she uses vim", "Kim: I switched to emacs", "value_swap"),
        ("Kim: I like jazz", "Kim: I don't like jazz", "negation"),
        ("Kim: I live in Berlin", "Ravi: I live in Munich", None),  # two speakers
    ],
)
def test_contradictions_see_speakers_and_tense(a: str, b: str, rule: str | None) -> None:
    for x, y in ((a, b), (b, a)):
        found = detect_contradiction(x, y)
        assert (found.rule if found else None) == rule, (x, y, found)


def test_same_value_in_other_words() -> None:
    assert same_value("dark mode", "dark mode in every editor")
    assert same_value("dark mode in every editor", "dark mode in all editors")
    assert not same_value("green tea", "black tea")
    assert not same_value("3 cats", "4 cats")


def episode(store: MemoryStore, text: str, *, days: float = 0, **kw) -> dict:
    return store.remember("kim", text, kind="episodic", created_at=T0 + timedelta(days=days), **kw).memory


def beliefs(store: MemoryStore) -> dict[str, float]:
    return {
        r["content"]: r["confidence"] for r in store.list_memories("kim", kind="semantic") if r["source"] == "derived"
    }


def test_repetitions_in_other_words_are_one_belief(store: MemoryStore) -> None:
    for i, text in enumerate(
        (
            "Session 1: Kim said she prefers dark mode in every editor",
            "Kim: I prefer dark mode in all editors",
            "[2026-02-03] Kim mentioned she prefers dark mode",
        )
    ):
        episode(store, text, days=i)
    report = consolidate(store, "kim", scope="full", now=T0 + timedelta(days=5))
    assert report.beliefs_created == 1, report
    [(content, _conf)] = beliefs(store).items()
    assert content.startswith("Kim prefers dark mode")


def test_a_change_of_mind_yields_the_newer_belief(store: MemoryStore) -> None:
    for i, text in enumerate(("Kim: I use vim for everything", "Kim said she uses vim", "Kim: vim is what I use")):
        episode(store, text, days=i)
    episode(store, "Kim: I switched from vim to emacs", days=10)
    episode(store, "Kim said she uses emacs now", days=11)
    consolidate(store, "kim", scope="full", now=T0 + timedelta(days=12))
    assert [c for c in beliefs(store) if "emacs" in c] == ["Kim uses emacs."]
    assert not [c for c in beliefs(store) if "uses vim" in c]


def test_hedged_repetitions_give_less_confidence(store: MemoryStore, tmp_path) -> None:
    sure = MemoryStore.open(str(tmp_path / "sure"), settings=store.settings)
    for i in range(4):  # four hedged votes weigh two: a belief at lower confidence
        episode(store, f"Session {i}: Kim: I think I prefer tea", days=i)
        episode(sure, f"Session {i}: Kim: I prefer tea", days=i)
    for s in (store, sure):
        consolidate(s, "kim", scope="full", now=T0 + timedelta(days=5))
    assert beliefs(store)["Kim prefers tea."] < beliefs(sure)["Kim prefers tea."]


@pytest.mark.parametrize(
    ("text", "pair", "outcome"),
    [
        (
            "When the build fails on lint errors, run ruff --fix and retry (3)",
            ("the build fails on lint errors", "run ruff --fix and retry"),
            None,
        ),
        ("If the cache is stale then clear it", ("the cache is stale", "clear it"), None),
        ("Flaky test in CI -> fixed by pinning the seed", ("Flaky test in CI", "pinning the seed"), "success"),
        ("Tried a clean rebuild after the linker error: worked", ("the linker error", "a clean rebuild"), "success"),
        (
            "Tried restarting the pod after the OOM kill - didn't work",
            ("the OOM kill", "restarting the pod"),
            "failure",
        ),
        ("Session 4: agent: When disk is full, prune old logs", ("disk is full", "prune old logs"), None),
        ("The build is green again", None, "success"),
    ],
)
def test_trigger_action_from_logged_fixes(text: str, pair: tuple[str, str] | None, outcome: str | None) -> None:
    assert trigger_action(text, {}) == pair
    assert text_outcome(text, pair[0] if pair else None) == outcome


def test_logged_fixes_without_outcome_metadata_become_a_procedure(store: MemoryStore) -> None:
    for i in range(3):
        episode(store, f"Tried a clean rebuild after the linker error: worked ({i})", days=i)
    report = consolidate(store, "kim", scope="full", now=T0 + timedelta(days=4))
    assert report.procedures_created == 1
    [proc] = [r for r in store.list_memories("kim", kind="procedural")]
    assert proc["content"] == "When the linker error, a clean rebuild."


def test_a_change_of_mind_after_a_belief_flags_the_older_one(store: MemoryStore) -> None:
    from engram_pipeline.lifecycle.contradictions import detect_contradictions

    for i, text in enumerate(("Kim: I use vim for everything", "Kim said she uses vim")):
        episode(store, text, days=i)
    consolidate(store, "kim", scope="full", now=T0 + timedelta(days=3))
    assert list(beliefs(store)) == ["Kim uses vim."]
    episode(store, "Kim: I switched from vim to emacs", days=10)
    episode(store, "Kim said she uses emacs now", days=11)
    consolidate(store, "kim", scope="full", now=T0 + timedelta(days=12))
    detect_contradictions(store, "kim", now=T0 + timedelta(days=12))  # policy flag (the default)
    derived = {r["content"]: r for r in store.list_memories("kim", kind="semantic") if r["source"] == "derived"}
    assert set(derived) == {"Kim uses vim.", "Kim uses emacs."}
    assert derived["Kim uses vim."]["status"] == derived["Kim uses emacs."]["status"] == "contradicted"
