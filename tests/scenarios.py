"""Scenarios the tests and the benchmarks share, each written once (``from tests.scenarios import ...``)."""

from __future__ import annotations

# Five facts an agent wrote three ways each; with one exact repeat of each fact, a value swap and its repeat,
# the 22 writes of the rewordings scenario (tests/cli/test_merge_rewordings.py, bench/bench_merge_quality.py).
REWORDED_FACTS = [
    ["User lives in Berlin.", "The user resides in Berlin.", "I live in Berlin."],
    [
        "User prefers dark mode in the editor.",
        "The user likes a dark theme in the editor.",
        "In the editor the user prefers dark mode.",
    ],
    [
        "The team uses Jira for issue tracking.",
        "The team tracks its issues in Jira.",
        "Issues are tracked in Jira by the team.",
    ],
    [
        "User's favourite programming language is Python.",
        "Python is the user's favourite programming language.",
        "The user likes Python best of all programming languages.",
    ],
    [
        "The weekly sync meeting is on Tuesday.",
        "The team has its weekly sync on Tuesday.",
        "Every Tuesday there is the weekly sync meeting.",
    ],
]
VALUE_SWAP = "User lives in Munich."
REWORDING_WRITES = [w for fact in REWORDED_FACTS for w in fact] + [f[0] for f in REWORDED_FACTS] + [VALUE_SWAP] * 2
