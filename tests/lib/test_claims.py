"""Claim parsing and the lexical contradiction rules (pure functions, no store)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram_pipeline.claims import (
    Claim,
    content_tokens,
    detect_contradiction,
    normalise_value,
    parse_claims,
)

# (a, b, expected rule or None); every pair is checked in both orders.
PAIRS = [
    # value_swap
    ("User lives in Berlin.", "The user lives in Munich.", "value_swap"),
    ("I work at Acme", "The user works for Globex", "value_swap"),
    ("User is employed by Acme", "User works at Globex", "value_swap"),
    ("User prefers dark mode", "The user prefers light mode", "value_swap"),
    ("Alice uses vim", "Alice uses emacs", "value_swap"),
    ("My editor: vim", "The user's editor = emacs", "value_swap"),
    ("The capital is Paris", "The capital was Lyon", "value_swap"),
    ("User prefers dark mode in the editor", "User prefers light mode in the editor", "value_swap"),
    # preferences qualified by different domains coexist
    ("User prefers black for formatting.", "The user prefers dark mode in their editor.", None),
    ("User lives in Berlin and works at Acme.", "User works at Globex.", "value_swap"),
    ("User lives in Berlin", "User is based in Munich", "value_swap"),
    # value_swap refused: elaborations, equal values, paraphrases, other subjects, negated swaps
    ("User uses vim", "User uses vim with plugins", None),
    ("User lives in Berlin", "User lives in Berlin, Germany", None),
    ("User lives in Berlin", "user lives in berlin.", None),
    ("User lives in Berlin", "The user is based in Berlin", None),
    ("User is employed by Acme", "I work for Acme", None),
    ("I prefer Python", "The user prefers python.", None),
    ("Alice uses vim", "Bob uses emacs", None),
    ("User does not use vim", "User does not use emacs", None),
    ("User likes cats", "User likes dogs", None),
    ("Alice has 3 cats", "Alice has 2 dogs", None),
    ("A man is playing a guitar", "A man is strumming a guitar", None),
    ("A man is playing a guitar", "The man is playing the guitar", None),
    # negation
    ("A man is playing a guitar", "A man is not playing a guitar", "negation"),
    ("User uses vim", "User no longer uses vim", "negation"),
    ("User uses tabs", "User never uses tabs", "negation"),
    ("The server is running", "The server isn't running", "negation"),
    ("User likes jazz", "User doesn't like jazz", "negation"),
    ("User lives in Berlin", "User no longer lives in Berlin", "negation"),
    ("The user is vegetarian", "The user is no longer vegetarian", "negation"),
    ("User dislikes jazz", "User doesn't dislike jazz", "negation"),
    ("The dog barks at night", "The dog does not bark at night", "negation"),
    ("User does not use vim", "User uses vim with plugins", "negation"),
    ("User uses vim", "User does not use vim with plugins", None),
    # opposite
    ("User likes vim", "User hates vim", "opposite"),
    ("User likes jazz", "User dislikes jazz", "opposite"),
    ("User prefers tea", "User avoids tea", "opposite"),
    ("User always uses tabs", "User never uses tabs", "opposite"),
    ("The build is always green", "The build is never green", "opposite"),
    ("User hates vim", "User doesn't like vim", None),
    # quantity
    ("The meeting is at 3pm", "The meeting is at 4pm", "quantity"),
    ("The meeting is at 3 pm", "The meeting is at 4pm tomorrow", "quantity"),
    ("Alice has 3 cats", "Alice has 5 cats", "quantity"),
    ("Alice has three cats", "Alice has 5 cats", "quantity"),
    ("The deadline is 2024-05-01", "deadline is 2024-06-01", "quantity"),
    ("The deadline is May 1", "The deadline is June 1", "quantity"),
    ("Five killed in bus crash", "Seven killed in bus crash", "quantity"),
    ("Alice has three cats", "Alice has 3 cats", None),
    ("The meeting is at 3pm", "The party is at 4pm", None),
    ("Alice has 3 cats", "Bob has 5 cats", None),
    # dialogue turns (issue 34): each speaker speaks for themselves; a third person they both name can clash
    ("Priya: The weather is awful here.", "Tom: The weather is lovely here.", None),
    ("Mira: Our landlord is strict.", "Jonas: Our landlord is so relaxed.", None),
    ("Dana: The kids are sleeping well.", "Leo: The kids are not sleeping well.", None),
    ("Dana: We have 2 weddings this month.", "Leo: We have 3 weddings this month.", None),
    ("Dana: I love hiking, honestly.", "Leo: I don't like hiking.", None),
    ("Dana: Leo lives in Porto.", "Leo: I live in Madrid.", None),
    ("Dana: Sam lives in Porto.", "Leo: Sam lives in Madrid now.", "value_swap"),
    ("Dana: The kids are sleeping well.", "Dana: The kids are not sleeping well.", "negation"),
    # a value's aside is not its value; a state this week is not a value; an activity is not exclusive
    ("Mira: I live in Krakow, near the river.", "Mira: I still live in Krakow, the rent keeps rising.", None),
    ("Jonas: I work at Initech, in the data team.", "Jonas: I still work at Initech, three years now.", None),
    ("Mira: I live in Krakow, near the river.", "Mira: I still live in Ghent, the rent keeps rising.", "value_swap"),
    ("Jonas: I'm so stressed this week, honestly.", "Jonas: I'm so relaxed this week, honestly.", None),
    ("The meeting is at 3pm today", "The meeting is at 4pm today", "quantity"),
    ("This project uses Python", "This project uses Rust", "value_swap"),  # a note's "this" is its context
    ("Dana: That app is a great idea.", "Dana: That app is a terrible idea.", None),  # a turn's, the talk before
    ("Dana is busy today", "Dana is not busy today", "negation"),
    ("Dana: I'm still training to be a paramedic.", "Dana: I am a nurse.", None),
    # a context prefix is no quantity of the turn: a turn said again in another session is the same turn
    ("Session 3: Dana: Good night, speak next week.", "Session 5: Dana: Good night, speak next week.", None),
    ("(turn 5) Dana: We have 2 weddings.", "(turn 9) Dana: We have 2 weddings.", None),
    ("[2026-01-09] Leo: Evening Dana!", "[2026-01-12] Leo: Evening Dana!", None),
    ("Session 3: Dana: We have 2 weddings.", "Session 3: Dana: We have 3 weddings.", "quantity"),
    # no claims, unrelated
    ("Hello there", "Good morning", None),
    ("User lives in Berlin", "The weather is nice today", None),
    ("Where does the user live?", "User lives in Munich", None),
    ("He lives in Berlin", "He lives in Munich", None),
    ("", "User lives in Berlin", None),
]


@pytest.mark.parametrize(("a", "b", "rule"), PAIRS)
def test_detect_contradiction_both_ways(a: str, b: str, rule: str | None) -> None:
    for x, y in ((a, b), (b, a)):
        found = detect_contradiction(x, y)
        assert (found.rule if found else None) == rule, (x, y, found)


def test_reasons_are_specific_per_rule() -> None:
    swap = detect_contradiction("User lives in Berlin.", "The user lives in Munich.")
    assert swap is not None and swap.subject == "user"
    assert swap.reason == "value swap: user lives_in 'berlin' vs 'munich'"
    opposite = detect_contradiction("User likes vim", "User hates vim")
    assert opposite is not None and opposite.reason == "opposite: user likes vs hates 'vim'"
    negation = detect_contradiction("User uses vim", "User no longer uses vim")
    assert negation is not None and negation.reason.startswith("negation: user uses 'vim'")
    quantity = detect_contradiction("Alice has 3 cats", "Alice has 5 cats")
    assert quantity is not None and quantity.reason == "quantity: alice has '3 cats' vs '5 cats'"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The user lives in Berlin.", [("user", "lives_in", "berlin", False)]),
        ("I don't use tabs", [("user", "uses", "tabs", True)]),
        ("Me: a fan of jazz", [("user", "is", "fan of jazz", False)]),
        ("User prefers vim", [("user", "prefers", "vim", False)]),
        ("We prefer vim", []),
        ("Users prefer vim", [("users", "prefers", "vim", False)]),
        ("User hates vim", [("user", "likes", "vim", True)]),
        ("User avoids tabs", [("user", "prefers", "tabs", True)]),
        ("User is not based in Berlin", [("user", "based_in", "berlin", True)]),
        ("User is employed by Acme Corp.", [("user", "works_at", "acme corp", False)]),
        ("The user's editor = Neovim", [("editor", "is", "neovim", False)]),
        ("My cats are the best", [("cats", "is", "best", False)]),
        ("A man is not playing a guitar.", [("man", "is", "playing guitar", True)]),
        ("The meeting is at 3:30 pm", [("meeting", "is", "at 3:30pm", False)]),
        ("User uses C++ and node.js", [("user", "uses", "c++ and node.js", False)]),
        (
            "User lives in Berlin and works at Acme. I never use tabs!",
            [
                ("user", "lives_in", "berlin", False),
                ("user", "works_at", "acme", False),
                ("user", "uses", "tabs", True),
            ],
        ),
        ("Does the user live in Berlin?", []),
        ("He is tall", []),
        ("Hello there", []),
        ("", []),
    ],
)
def test_parse_claims(text: str, expected: list[tuple[str, str, str, bool]]) -> None:
    assert [(c.subject, c.relation, c.value, c.negated) for c in parse_claims(text)] == expected


def test_claim_keeps_its_source_sentence() -> None:
    claims = parse_claims("User lives in Berlin. User works at Acme.")
    assert claims == [
        Claim("user", "lives_in", "berlin", False, "User lives in Berlin."),
        Claim("user", "works_at", "acme", False, "User works at Acme."),
    ]


def test_normalise_value_and_content_tokens() -> None:
    assert normalise_value("  The   Vim editor. ") == "vim editor"
    assert normalise_value('"Acme Corp"!') == "acme corp"
    assert content_tokens("The user uses vim with the plugins") == frozenset(
        {"user", "uses", "vim", "plugins"}
    )
    assert content_tokens("User isn't here") == frozenset({"user", "not", "here"})


SUBJECTS = st.sampled_from(["User", "The user", "I", "Alice", "My editor", "The meeting", "A man"])
VERBS = st.sampled_from(
    [
        "lives in",
        "works at",
        "is based in",
        "prefers",
        "avoids",
        "uses",
        "likes",
        "hates",
        "has",
        "is",
        "is not",
        "does not use",
        "no longer uses",
        "always uses",
        "never uses",
        "=",
        ":",
    ]
)
VALUES = st.sampled_from(
    [
        "Berlin",
        "Munich",
        "vim",
        "vim with plugins",
        "emacs",
        "3 cats",
        "5 cats",
        "3pm",
        "4pm",
        "2024-05-01",
        "playing a guitar",
        "tea",
        "dark mode",
    ]
)
SENTENCES = st.one_of(
    st.builds(lambda s, v, o: f"{s} {v} {o}", SUBJECTS, VERBS, VALUES),
    st.text(alphabet=st.sampled_from("abc isnotuer.,:=0123456789"), max_size=40),
)


@given(SENTENCES, SENTENCES)
def test_detect_contradiction_is_symmetric(a: str, b: str) -> None:
    ab, ba = detect_contradiction(a, b), detect_contradiction(b, a)
    assert (ab.rule if ab else None) == (ba.rule if ba else None)


@given(SENTENCES)
def test_a_sentence_never_contradicts_itself(a: str) -> None:
    assert detect_contradiction(a, a) is None
    assert detect_contradiction(a, f"  {a.upper()} ") is None
