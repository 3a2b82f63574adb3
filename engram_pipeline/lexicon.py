"""The word lists the text rules share: number words, calendar words and the relations claims are made of.

Claim parsing (:mod:`engram_pipeline.claims`), the merge guard (:mod:`engram_pipeline.merge_guard`), the
judge and belief distillation read these; each may take a subset (the merge guard leaves out "one"), but no
module keeps its own copy.

>>> NUMBER_WORDS["twelve"], NUMBER_WORDS["dozen"], "may" in MONTHS
('12', '12', False)
>>> relation_family("based_in"), "lives_in" in FUNCTIONAL_RELATIONS
('lives_in', True)
"""

from __future__ import annotations


def words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve") + (
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
)
NUMBER_WORDS: dict[str, str] = {w: str(i) for i, w in enumerate(_UNITS)} | {
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "seventy": "70",
    "eighty": "80",
    "ninety": "90",
    "hundred": "100",
    "thousand": "1000",
    "million": "1000000",
    "billion": "1000000000",
    "dozen": "12",
}

# not "may": a modal verb far more often than a month in memory text
MONTHS = words("january february march april june july august september october november december")
MONTH_ABBREVIATIONS = words("jan feb mar apr jun jul aug sep sept oct nov dec")
WEEKDAYS = words("monday tuesday wednesday thursday friday saturday sunday")

# Relations with one value at a time: a second value for the same subject is a change or a contradiction
# ("lives in Berlin" / "lives in Munich"), not a second fact. "likes" and "has" take many values.
FUNCTIONAL_RELATIONS = frozenset({"lives_in", "based_in", "works_at", "prefers", "uses", "is"})
# Relations that say the same thing in other words, mapped to the one they are compared as.
RELATION_FAMILY = {"based_in": "lives_in", "prefers": "likes"}


def relation_family(relation: str) -> str:
    return RELATION_FAMILY.get(relation, relation)
