"""Hand-written conversations and tool logs, with what a careful reader would derive from them.

Three agents' episodes in the forms agents record them: dialogue turns with several speakers, first person,
reported speech, pronouns, session and date prefixes, hedges, changes of mind, past tense, small talk, and
tool logs that say what fixed what. ``BELIEFS`` and ``PROCEDURES`` are the labels: what a person reading
the episodes would conclude (some of which the lexical parser cannot read: they count against its recall).
``tests/lib/lifecycle/test_conversations.py`` holds the floor; ``bench/bench_consolidation_quality.py`` reports
precision and recall and the time per 10k episodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from engram_pipeline.claims import normalise_value, same_value
from engram_pipeline.lifecycle.beliefs import family
from engram_pipeline.model import loads_metadata

START = datetime(2026, 1, 5, 9, tzinfo=UTC)

# (day, content, outcome) per agent; outcome None unless the log records it
EPISODES: dict[str, list[tuple[int, str, str | None]]] = {
    "kim": [
        (0, "Session 1: Kim: Hi Sam! I finally moved to Lisbon last month.", None),
        (0, "Sam: Lisbon! How do you like it?", None),
        (0, "Kim: I love it, I live in Lisbon near the river now.", None),
        (0, "Sam: I live in Porto, so we are close.", None),
        (0, "Kim: Haha, finally neighbours again.", None),
        (3, "Session 2: Kim said she prefers dark mode in every editor", None),
        (3, "Kim: I prefer dark mode, my eyes hurt otherwise.", None),
        (3, "Sam: Same, light themes are brutal.", None),
        (3, "Kim mentioned that she uses vim for everything.", None),
        (4, "[2026-01-09] Kim: I use vim at work too.", None),
        (4, "Kim: I used to live in Berlin, before Lisbon.", None),
        (6, "Session 3: Kim: I think I like jazz.", None),
        (6, "Sam: Jazz? Since when?", None),
        (6, "Kim: I like jazz a lot these days, especially on Sundays.", None),
        (7, "Sam: I live in Porto, right by the beach.", None),
        (7, "Kim: I'm so tired this week, honestly.", None),
        (9, "Session 4: Kim: I switched from vim to emacs last week.", None),
        (9, "Kim said she uses emacs now and loves it.", None),
        (9, "Kim: I don't drink coffee anymore.", None),
        (10, "Kim said she stopped drinking coffee in January.", None),
        (10, "Sam: Did you watch the match yesterday?", None),
        (2, "When the build fails on lint errors, run ruff --fix and retry (1)", "success"),
        (5, "When the build fails on lint errors, run ruff --fix and retry (2)", "success"),
        (8, "When the build fails on lint errors, run ruff --fix and retry (3)", "success"),
        (5, "Tried clearing the npm cache after the install error: worked", None),
        (8, "Tried clearing the npm cache after the install error: worked again", None),
        (8, "Tried reinstalling node after the install error - didn't work", None),
    ],
    "ravi": [
        (0, "Session 1: Ravi: I work at Northwind as a data engineer.", None),
        (0, "Ravi said his team uses Airflow for scheduling.", None),
        (1, "Ravi: My team uses Airflow, mostly for nightly jobs.", None),
        (1, "Assistant: Noted, I will remember that.", None),
        (2, "Ravi mentioned he works at Northwind, on the platform team.", None),
        (2, "Ravi: I prefer tea over coffee.", None),
        (4, "Session 2: Ravi said he prefers tea.", None),
        (4, "Ravi: I hate meetings before 10am.", None),
        (5, "Ravi said he hates early meetings.", None),
        (5, "Ravi: Maybe I will move to Berlin next year.", None),
        (6, "He said it was fine.", None),
        (6, "Ravi: I still work at Northwind, four years now.", None),
        (3, "[deploy 3141] If the deploy times out then roll back and page on-call", "success"),
        (6, "[deploy 3177] If the deploy times out then roll back and page on-call", "success"),
        (7, "Disk full on the build host -> fixed by pruning docker images", None),
        (9, "2026-01-14 03:10 - Disk full on the build host -> fixed by pruning docker images", None),
        (9, "Tried restarting the pod after the OOM kill - didn't work", None),
    ],
    "ana": [
        (0, "Session 1: Ana: I live in Madrid, in Lavapies.", None),
        (0, "Bea: I live in Sevilla, you know that.", None),
        (0, "Bea: Ana lives in Madrid, right?", None),
        (2, "Session 2: Ana said she lives in Madrid.", None),
        (2, "Bea mentioned she lives in Sevilla now.", None),
        (2, "Ana: I used to use Windows.", None),
        (3, "Ana: I use Linux now, Fedora mostly.", None),
        (4, "Ana said she uses Linux at home.", None),
        (4, "Ana: I have two cats.", None),
        (5, "Ana: I have 2 cats, Tom and Jerry.", None),
        (5, "Bea: Haha, those cats again.", None),
        (6, "Session 3: Ana: I don't like horror movies.", None),
        (6, "Ana said she doesn't like horror movies at all.", None),
        (7, "Bea: I'm so excited about the festival!", None),
        (8, "[2026-01-13 15:02] When the laptop overheats, close the browser tabs", "success"),
        (9, "[2026-01-14 10:40] When the laptop overheats, close the browser tabs", "failure"),
        (9, "[2026-01-14 16:15] When the laptop overheats, close the browser tabs", "success"),
    ],
}

# (subject, relation, value, negated): what a careful reader concludes
BELIEFS: dict[str, list[tuple[str, str, str, bool]]] = {
    "kim": [
        ("kim", "lives_in", "lisbon", False),
        ("kim", "prefers", "dark mode", False),
        ("kim", "uses", "emacs", False),
        ("kim", "likes", "jazz", False),
        ("sam", "lives_in", "porto", False),
        ("kim", "drinks", "coffee", True),  # no verb the lexical parser knows
    ],
    "ravi": [
        ("ravi", "works_at", "northwind", False),
        ("ravi's team", "uses", "airflow", False),
        ("ravi", "prefers", "tea", False),
        ("ravi", "likes", "early meetings", True),  # "hates meetings before 10am" / "hates early meetings"
    ],
    "ana": [
        ("ana", "lives_in", "madrid", False),
        ("bea", "lives_in", "sevilla", False),
        ("ana", "uses", "linux", False),
        ("ana", "has", "2 cats", False),
        ("ana", "likes", "horror movies", True),
    ],
}

# (trigger, action)
PROCEDURES: dict[str, list[tuple[str, str]]] = {
    "kim": [
        ("the build fails on lint errors", "run ruff --fix and retry"),
        ("the install error", "clearing the npm cache"),
    ],
    "ravi": [
        ("the deploy times out", "roll back and page on-call"),
        ("disk full on the build host", "pruning docker images"),
    ],
    "ana": [("the laptop overheats", "close the browser tabs")],
}


def import_lines(agents: Iterable[str] | None = None, *, suffix: str = "") -> list[dict[str, Any]]:
    """The episodes as import lines (``agent_id + suffix``, so copies can scale the corpus)."""
    out = []
    for agent in agents or EPISODES:
        for n, (day, content, outcome) in enumerate(EPISODES[agent]):
            line: dict[str, Any] = {
                "agent_id": agent + suffix,
                "content": content,
                "kind": "episodic",
                "source": "user",
                "created_at": (START + timedelta(days=day, minutes=n)).isoformat(),
            }
            if outcome:
                line["outcome"] = outcome
            out.append(line)
    return out


def belief_match(label: tuple[str, str, str, bool], row: dict[str, Any]) -> bool:
    """Whether a derived belief row says what the label says (its ``belief_key``; values in other words match)."""
    subject, relation, value, negated = label
    parts = str(loads_metadata(row).get("belief_key", "")).split("|")
    if len(parts) != 4:
        return False
    return (
        parts[0] == subject
        and parts[1] == family(relation)
        and (parts[3] == "-") == negated
        and same_value(normalise_value(parts[2]), value)
    )


def score(derived: Sequence[dict[str, Any]], labels: Sequence[Any], match: Any) -> tuple[int, int, int]:
    """(true positives, derived, labelled): each derived row matches at most one label and vice versa."""
    used: set[int] = set()
    tp = 0
    for row in derived:
        hit = next((i for i, lab in enumerate(labels) if i not in used and match(lab, row)), None)
        if hit is not None:
            used.add(hit)
            tp += 1
    return tp, len(derived), len(labels)


def procedure_match(label: tuple[str, str], row: dict[str, Any]) -> bool:
    """Whether a derived procedure row has the label's trigger and action."""
    meta = loads_metadata(row)
    return normalise_value(str(meta.get("trigger", ""))) == normalise_value(label[0]) and normalise_value(
        str(meta.get("action", ""))
    ) == normalise_value(label[1])
