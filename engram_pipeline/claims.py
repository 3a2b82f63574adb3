"""Claims read from memory text, and the lexical rules that say when two memories contradict each other.

A *claim* is ``(subject, relation, value)`` plus a polarity, read from one sentence by fixed patterns:

- relational: ``X prefers / uses / likes / lives in / works at / works for / is employed by / is based in /
  has Y`` and the opposite verbs ``dislikes / hates`` (of ``likes``) and ``avoids`` (of ``prefers``);
- copular: ``X is / are / was / were / am Y``, ``X = Y`` and ``X: Y`` (relation ``"is"``).

Negation is ``not`` / ``n't`` / ``never`` / ``no longer`` (``negated=True``); an opposite verb is stored as
the negated base relation (``"User hates vim"`` is ``likes`` negated). Subjects and values are lowercased with
the determiners (``the a an my our his her their its``) removed; ``I`` / ``me`` become ``user``, so "I",
"User" and "the user" are one subject, and a leading ``user's`` is dropped ("my editor" = "the user's
editor"). Questions, bare pronoun subjects (he, it, they...; "you" unless the turn's listener is known) and,
in a dialogue turn, demonstrative ones ("Dana: That app is a great idea") and modal ones ("Leo: You should live
in Lisbon") give no claim, nor does a report the rewriting left unresolved ("Kim said you live in Lisbon" is not
a claim about "kim said you"): two memories saying "he" need not mean the same person, and
"that app" is whatever the turns before it named; nor does ``has`` before a participle ("has been busy" is a
tense).

:func:`detect_contradiction` compares every claim of one text with every claim of the other that has the
same subject and relation family (``lives_in`` ~ ``based_in``, ``prefers`` ~ ``likes``); the first rule of
these that fires wins:

- ``negation``: one side negates what the other asserts ("X is not Y" / "X is Y", "no longer uses Y" / "uses
  Y"); the negated value may be less specific ("does not use vim" / "uses vim with plugins");
- ``opposite``: the same, by an opposite verb or adverb (likes / hates, prefers / avoids, always / never);
- ``quantity``: only the numbers, times, dates or months differ ("meeting is at 3pm" / "meeting is at 4pm");
- ``value_swap``: a functional relation (prefers, uses, lives_in, based_in, works_at, is) with another value
  ("User lives in Berlin" / "User lives in Munich"). Refused when the values are equal, when one value's
  content tokens are a subset of the other's ("vim" / "vim with plugins" is an elaboration), when either side
  is negated, when a value has more than four content tokens (a description, whose rewordings are not swaps),
  for progressive copulas ("is playing a guitar" / "is still training to be a nurse": activities coexist),
  when both values carry different qualifiers ("black for formatting" / "dark mode in the editor": two
  domains), and for a state at one moment ("so tired this week" / "so relaxed this week": :func:`transient`).
  Values are compared by :func:`head_value` (up to the first comma: "Krakow, near the river" = "Krakow, the
  rent keeps rising"). ``likes`` and ``has`` are not functional: "likes cats" / "likes dogs" is no
  contradiction.

Two turns of two different speakers (``Dana: ...`` / ``Leo: ...``) contradict only through a claim about a
third person both name with a capital ("Sam lives in Porto" / "Sam lives in Madrid"): each speaker speaks for
themselves ("The weather is awful here." / "The weather is lovely here."), and the sentence-level checks below
do not apply between them.

Sentences without a parsed claim still get a sentence-level check: identical content tokens apart from one
negation ("The dog does not bark" / "The dog barks") is ``negation``, apart from numbers is ``quantity``.
Every rule is symmetric in its two arguments, and identical texts never contradict each other.

>>> detect_contradiction("User lives in Berlin.", "The user lives in Munich.").reason
"value swap: user lives_in 'berlin' vs 'munich'"
>>> detect_contradiction("User uses vim", "User uses vim with plugins") is None
True
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram_pipeline import utterances
from engram_pipeline.lexicon import (
    FUNCTIONAL_RELATIONS,
    MONTH_ABBREVIATIONS,
    MONTHS,
    NUMBER_WORDS,
    WEEKDAYS,
    relation_family,
    words,
)
from engram_pipeline.text_sets import SMALL_BATCH, TEXT_CACHE_SIZE, TextTable
from engram_pipeline.utterances import Sentence, split_sentences

__all__ = [
    "Claim",
    "Contradiction",
    "content_tokens",
    "detect_contradiction",
    "detect_contradictions",
    "normalise_value",
    "same_value",
    "parse_claims",
]


DETERMINERS = frozenset({"the", "a", "an", "my", "our", "his", "her", "their", "its"})
STOPWORDS = DETERMINERS | words(
    "is are was were be been being am do does did to of in on at for with by from as and or but so "
    "that this these those it there then than also just very"
)
_PRONOUNS = words("he she it they we you this that these those there here who what which")
_SUBORDINATORS = words("when if because although though while after before since unless whether")
_MONTHS = MONTHS | MONTH_ABBREVIATIONS
_DEMONSTRATIVES = words("this that these those")
_PERFECT = words("been had got gotten done gone seen made taken")
_HYPOTHETICAL = words("should could would might may")
# (pattern, relation, opposite verb?) in match order: longer forms first.
_VERBS: tuple[tuple[str, str, bool], ...] = (
    (r"(?:lives?|living|resides?|residing) in", "lives_in", False),
    (r"(?:works?|working) (?:at|for)|employed by", "works_at", False),
    (r"(?:based|located) in", "based_in", False),
    (r"prefers?|preferring", "prefers", False),
    (r"avoids?|avoiding", "prefers", True),
    (r"uses?|using", "uses", False),
    (r"dislikes?|disliking|hates?|hating|detests?", "likes", True),
    (r"likes?|liking|loves?|loving|enjoys?|enjoying", "likes", False),
    (r"has|have|owns?", "has", False),
)
_MODS = (
    r"(?:(?:does|do|did|is|are|am|was|were|will|would|can|could|should|may|might|must|still|also|now|usually|often|really"
    r"|generally|currently|mostly|strongly|only|just|always|never|not|no longer)\s+)*"
)
_VERB_ALTERNATIVES = "|".join(f"(?:{p})" for p, _, _ in _VERBS)
_RELATIONAL = re.compile(rf"^(?P<subj>.+?)\s+(?P<mods>{_MODS})(?P<verb>{_VERB_ALTERNATIVES})\s+(?P<val>\S.*)$")
_VERB_RES = tuple((re.compile(rf"(?:{p})$"), rel, opp) for p, rel, opp in _VERBS)
_COPULA = re.compile(r"^(?P<subj>.+?)(?:\s+(?P<verb>is|are|was|were|am)\s+|\s*(?P<sym>=|:)\s+)(?P<val>\S.*)$")
_LEADING_NEG = re.compile(r"^(?P<adv>(?:(?:not|no longer|never|always)\s+)*)(?P<rest>.*)$")
_TOKEN = re.compile(r"[\w][\w+#'.\-/:]*")
_NUMBER = re.compile(r"\d+(?:[.,:/\-]\d+)*(?:st|nd|rd|th|am|pm|s|k|m|h|%)?")
_CLAUSE = re.compile(rf"\s*,?\s+(?:and|but)\s+(?={_MODS}(?:{_VERB_ALTERNATIVES})\s)")


@dataclass(frozen=True)
class Claim:
    """One ``(subject, relation, value)`` claim with its polarity, and the sentence it was read from."""

    subject: str
    relation: str
    value: str
    negated: bool
    text: str
    hedged: bool = False  # "I think ...", "maybe ..."
    past: bool = False  # "used to ...": says nothing about now
    changed: bool = False  # "switched to ...": a newer value than what came before


@dataclass(frozen=True)
class Contradiction:
    """Why two texts contradict: the rule that fired, a specific human-readable reason, the shared subject."""

    rule: str
    reason: str
    subject: str


@dataclass(frozen=True)
class _Parsed:
    claim: Claim
    verb: str  # surface verb, for reasons ("hates")
    opposite: bool  # polarity came from an opposite verb
    adverb: str | None  # "always" / "never"


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _expand(sentence: str) -> str:
    s = sentence.lower().replace("\u2019", "'").replace("can't", "can not").replace("won't", "will not")
    s = re.sub(r"n't\b", " not", s)
    s = re.sub(r"(\d)\s+(am|pm)\b", r"\1\2", s)
    return re.sub(r"\s+", " ", s).strip()


def _strip_determiners(s: str) -> str:
    words = [w for w in s.split() if w not in DETERMINERS]
    return " ".join(words)


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def normalise_value(s: str) -> str:
    """Lowercase, drop determiners, collapse whitespace, strip quotes and trailing punctuation."""
    s = _strip_determiners(_expand(s).strip("\"'`"))
    return s.rstrip(".,;:!?\"')`").lstrip("\"'(`").strip()


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def content_tokens(s: str) -> frozenset[str]:
    """Lowercase words of ``s`` minus a small stopword list (negations and numbers are kept)."""
    words = (w.rstrip(".-'/:") for w in _TOKEN.findall(_expand(s)))
    return frozenset(NUMBER_WORDS.get(w, w) for w in words if w and w not in STOPWORDS)


def _normalise_subject(s: str) -> str:
    s = normalise_value(s.strip(" ,;-"))
    s = re.sub(r"^(?:and|but|so|also|then)\s+", "", s)
    if s in {"i", "me", "myself"}:
        return "user"
    return re.sub(r"^user's\s+", "", s)


def _match(expanded: str) -> tuple[re.Match[str] | None, re.Match[str] | None]:
    rel, cop = _RELATIONAL.match(expanded), _COPULA.match(expanded)
    if rel and cop:  # keep the earlier verb: the subject ends at the first one (a tie goes to the relation)
        return (rel, None) if len(rel["subj"]) <= len(cop["subj"]) else (None, cop)
    return rel, cop


def _parse_sentence(sentence: str, expanded: str, marks: Sentence | None = None) -> list[_Parsed]:
    rel, cop = _match(expanded)
    if rel:
        subject, mods, verb, value = rel["subj"], rel["mods"].split(), rel["verb"], rel["val"]
        relation, opposite = next((r, o) for rx, r, o in _VERB_RES if rx.match(verb))
        rest = ""
        clause = _CLAUSE.search(value)
        if clause:  # "lives in Berlin and works at Acme": a second claim about the same subject
            value, rest = value[: clause.start()], value[clause.end() :]
        has_neg = "not" in mods or "never" in mods or "no longer" in rel["mods"]
        adverb = "never" if "never" in mods else "always" if "always" in mods else None
    elif cop:
        subject, value, verb = cop["subj"], cop["val"], cop["verb"] or cop["sym"]
        lead = _LEADING_NEG.match(value)
        assert lead is not None  # the pattern matches any string
        adverbs, value = lead["adv"], lead["rest"]
        relation, opposite, rest = "is", False, ""
        has_neg = any(n in adverbs.split() for n in ("not", "never")) or "no longer" in adverbs
        adverb = "never" if "never" in adverbs else "always" if "always" in adverbs else None
    else:
        return []
    subj, val = _normalise_subject(subject), normalise_value(value)
    if verb == ":" and len(subj.split()) > 3:
        return []  # "Tried X after Y: worked" is a log line, not a labelled fact ("My editor: vim")
    if val in _PRONOUNS or val.split(",")[0].strip() in _PRONOUNS:
        return []  # "I love it": what "it" is, the sentence does not say
    if not subj or not val or subj in _PRONOUNS or "," in subj or subj.split()[0] in _SUBORDINATORS:
        return []  # no subject, a pronoun, or a clause ("today, x", "when x"): nothing to compare
    if marks is not None and marks.speaker and subj.split()[0] in _DEMONSTRATIVES:
        return []  # "Dana: That app is a great idea": which app, only the conversation around it says
    if set(subj.split()[1:]) & utterances.REPORTING:
        return []  # "Kim said you live in Lisbon": whose claim, the rewriting did not resolve (not "kim said you")
    if marks is not None and marks.speaker and rel and set(mods) & _HYPOTHETICAL:
        return []  # "Leo: You should live in Lisbon": advice or a wish, not what is
    if relation == "has" and val.split()[0] in _PERFECT:
        return []  # "the weather has been strange": a tense, not a possession
    hedged, past, changed = (marks.hedged, marks.past, marks.changed) if marks else (False, False, False)
    claim = Claim(subj, relation, val, has_neg != opposite, sentence, hedged, past, changed)
    out = [_Parsed(claim, verb, opposite, adverb)]
    if rest:
        out += _parse_sentence(sentence, f"{subject} {rest}", marks)
    return out


# Cached: a pass compares each text with several neighbours (the merge judge's candidates, say).
@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _parse(text: str, listener: str | None = None) -> tuple[_Parsed, ...]:
    """Claims of ``text`` read the way agents write episodes (:mod:`engram_pipeline.utterances`: context
    prefixes dropped, speakers, "you" (given the ``listener``) and reported speech resolved, hedges and tense
    kept as marks)."""
    out: list[_Parsed] = []
    for sentence in utterances.read(text, listener):
        if not sentence.text.endswith("?"):  # a question asserts nothing
            out += _parse_sentence(sentence.text, _expand(sentence.text), sentence)
    return tuple(out)


def parse_claims(text: str, listener: str | None = None) -> list[Claim]:
    """Every claim in ``text``, sentence by sentence, in order (possibly none). ``listener``: who "you" is in
    a dialogue turn (:func:`engram_pipeline.utterances.listeners`); without one, "you" gives no claim.

    >>> [(c.subject, c.relation, c.value, c.negated) for c in parse_claims("I don't use tabs. My editor: vim")]
    [('user', 'uses', 'tabs', True), ('editor', 'is', 'vim', False)]
    >>> [(c.subject, c.value) for c in parse_claims("Leo: You still work at Globex.", listener="Dana")]
    [('dana', 'globex')]
    """
    return [p.claim for p in _parse(text, listener)]


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)  # a word recurs in many texts
def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if re.search(r"(?:ch|sh|x|z|ss)es$", word):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)  # a token recurs in many texts
def _is_numeric(token: str) -> bool:
    return bool(_NUMBER.fullmatch(token)) or token in _MONTHS


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _split_numbers(s: str) -> tuple[frozenset[str], frozenset[str]]:
    """(numbers, dates and months; the other content tokens, stemmed)."""
    tokens = content_tokens(s)
    nums = frozenset(t for t in tokens if _is_numeric(t))
    return nums, frozenset(_stem(t) for t in tokens - nums)


def _nested(x: frozenset[str], y: frozenset[str]) -> bool:
    return x <= y or y <= x


# Words that qualify how much or how sure, not what: "dark mode in *every* editor" = "in *all* editors".
_FILLERS = frozenset(words("every all each any whole so very really honestly definitely always pretty quite"))


def same_value(a: str, b: str) -> bool:
    """Whether two claim values say the same thing in other words: the same numbers, and content words
    (stemmed, without quantifiers and intensifiers) where one side's are contained in the other's ("dark mode"
    / "dark mode in every editor" / "dark mode in all editors"). "green tea" / "black tea" are different values.

    >>> same_value("dark mode in every editor", "dark mode in all editors"), same_value("green tea", "black tea")
    (True, False)
    """
    nums_a, words_a = _split_numbers(a)
    nums_b, words_b = _split_numbers(b)
    core_a, core_b = words_a - _FILLERS, words_b - _FILLERS
    if nums_a != nums_b or not core_a or not core_b:
        return nums_a == nums_b and core_a == core_b
    return _nested(core_a, core_b)


def _family(relation: str) -> str:
    return relation_family(relation)


# Time words trailing a value say when, not what: "lives in Berlin now" says "lives in Berlin".
_TRAILING = re.compile(
    r"(?:\s+(?:now|today|again|too|also|currently|nowadays|anymore|any more|these days|lately|recently|yesterday"
    r"|a lot|last (?:week|month|year|spring|summer|autumn|fall|winter)|this (?:week|month|year)))+$"
)


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def head_value(value: str) -> str:
    """What a value holds: up to its first comma (what follows is an aside: "Porto, right by the beach"),
    without trailing time words ("Lisbon now"). Beliefs hold it and the rules compare it.

    >>> head_value("krakow, near the river"), head_value("lisbon now")
    ('krakow', 'lisbon')
    """
    head = value.split(",")[0].strip() or value
    return _TRAILING.sub("", head).strip() or head


_ACTIVITY = re.compile(r"^(?:(?:still|now|currently|also|just|really|always)\s+)*\w+ing\b")
# A state at one moment ("so tired this week", "busy today") contradicts nothing said at another moment, and
# is no lasting belief (:func:`transient`).
_TRANSIENT = re.compile(
    r"\b(?:(?:this|that) (?:week|morning|afternoon|evening|weekend)|today|tonight|right now|at the moment"
    r"|last night|yesterday|on (?:" + "|".join(sorted(WEEKDAYS)) + r"))\b"
)  # "on Friday" is one day; "on Fridays" a habit


def transient(value: str) -> bool:
    """Whether a claim's value is a state at one moment ("so tired this week").

    >>> transient("so tired this week, honestly"), transient("training to be a nurse")
    (True, False)
    """
    return bool(_TRANSIENT.search(value))


def _compare(a: _Parsed, b: _Parsed) -> Contradiction | None:
    ca, cb = a.claim, b.claim
    if ca.subject != cb.subject or _family(ca.relation) != _family(cb.relation):
        return None
    if ca.past != cb.past:
        return None  # "used to live in Berlin" says nothing against "lives in Munich"
    subject = ca.subject
    value_a, value_b = head_value(ca.value), head_value(cb.value)
    nums_a, words_a = _split_numbers(value_a)
    nums_b, words_b = _split_numbers(value_b)
    if ca.negated != cb.negated:
        neg, pos = (a, b) if ca.negated else (b, a)
        nw, pw = (words_a, words_b) if ca.negated else (words_b, words_a)
        nn, pn = (nums_a, nums_b) if ca.negated else (nums_b, nums_a)
        if not (nw | nn) or not (nw <= pw and nn <= pn):
            return None
        value = neg.claim.value
        if neg.opposite != pos.opposite or {neg.adverb, pos.adverb} == {"never", "always"}:
            verbs = f"{a.adverb or ''} {a.verb}".strip(), f"{b.adverb or ''} {b.verb}".strip()
            reason = f"opposite: {subject} {verbs[0]} vs {verbs[1]} {value!r}"
            return Contradiction("opposite", reason, subject)
        reason = f"negation: {subject} {ca.relation} {value!r} asserted in one, negated in the other"
        return Contradiction("negation", reason, subject)
    if ca.negated or value_a == value_b:
        return None
    if nums_a and nums_b and nums_a != nums_b and _nested(words_a, words_b):
        reason = f"quantity: {subject} {ca.relation} {ca.value!r} vs {cb.value!r}"
        return Contradiction("quantity", reason, subject)
    if ca.relation not in FUNCTIONAL_RELATIONS or cb.relation not in FUNCTIONAL_RELATIONS or _nested(words_a, words_b):
        return None
    if max(len(words_a | nums_a), len(words_b | nums_b)) > _MAX_VALUE_TOKENS:
        return None  # a long description, not a value: rewordings of it are not swaps
    if ca.relation == "is" and any(_ACTIVITY.match(v) for v in (value_a, value_b)):
        return None  # "is playing X" / "is still training to be a nurse": activities are not exclusive values
    qa, qb = _qualifier(value_a), _qualifier(value_b)
    if qa and qb and qa != qb:
        return None  # "black for formatting" / "dark mode in the editor": preferences in different domains
    if transient(ca.value) or transient(cb.value):
        return None  # "is so tired this week" / "is so relaxed this week": two moments, not two values
    reason = f"value swap: {subject} {ca.relation} {ca.value!r} vs {cb.value!r}"
    return Contradiction("value_swap", reason, subject)


_QUALIFIER = re.compile(r"\b(?:for|in|on|at|with|when|during|while)\b(.+)$")


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _qualifier(value: str) -> frozenset[str]:
    """The content tokens of a value's trailing qualifier ("dark mode *in the editor*"), if it has one."""
    m = _QUALIFIER.search(value)
    return content_tokens(m.group(1)) if m else frozenset()


def _sentence_level(a: str, b: str) -> Contradiction | None:
    """Fallback for sentences without a claim: same content tokens apart from one negation or the numbers."""
    (base_a, neg_a), (base_b, neg_b) = _negation_view(a), _negation_view(b)
    if neg_a != neg_b and base_a == base_b and len(base_a) >= 2:
        negated = _expand(a if neg_a else b)
        subject = _normalise_subject(re.split(r"\b(?:not|never|no|does|do|did)\b", negated)[0])
        reason = f"negation: {' '.join(sorted(base_a))!r} negated in one sentence only"
        return Contradiction("negation", reason, subject)
    nums_a, words_a = _split_numbers(a)
    nums_b, words_b = _split_numbers(b)
    if nums_a and nums_b and nums_a != nums_b and words_a == words_b and len(words_a) >= 2:
        subject = " ".join(sorted(words_a))
        reason = f"quantity: {subject!r} with {' '.join(sorted(nums_a))} vs {' '.join(sorted(nums_b))}"
        return Contradiction("quantity", reason, subject)
    return None


_NEGATION_MARKS = frozenset({"not", "never", "no"})
_AUXILIARIES = frozenset({"does", "do", "did", "has", "have", "had"})


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _negation_view(sentence: str) -> tuple[frozenset[str], bool]:
    """A sentence's stemmed content tokens without negations and auxiliaries, and whether it negates."""
    tokens = content_tokens(re.sub(r"\bno longer\b", "not", _expand(sentence)))
    return frozenset(_stem(t) for t in tokens - _NEGATION_MARKS - _AUXILIARIES), bool(tokens & _NEGATION_MARKS)


# Cached: a text meets several neighbours on each write (split_sentences returns a fresh list each time).
@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def _sentences(text: str) -> tuple[str, ...]:
    # without its context prefix: "Session 3: Dana: Good night." and "Session 5: Dana: Good night." are one
    # sentence, not a quantity that changed (the claims are read without it too)
    return tuple(split_sentences(utterances.strip_context(text)))


_MAX_VALUE_TOKENS = 4
_PRIORITY = ("negation", "opposite", "quantity", "value_swap")


def detect_contradiction(a: str, b: str) -> Contradiction | None:
    """The contradiction between texts ``a`` and ``b`` by the rules above, or ``None``.

    Symmetric: ``(a, b)`` and ``(b, a)`` agree on whether a rule fires and which one.
    """
    if normalise_value(a) == normalise_value(b):
        return None
    claims_a, claims_b = _parse(a), _parse(b)
    found = [c for x in claims_a for y in claims_b if (c := _compare(x, y))]
    speakers = _two_speakers(a, b)
    if speakers:
        # Two people: each speaks for themselves ("The weather is awful here." / "The weather is lovely
        # here."), so only a claim about a third person they both name can contradict.
        found = [c for c in found if _third_person(c.subject, speakers, a, b)]
        return min(found, key=lambda c: _PRIORITY.index(c.rule)) if found else None
    if found:
        return min(found, key=lambda c: _PRIORITY.index(c.rule))
    parsed = {p.claim.text for p in claims_a + claims_b}
    found = [
        c
        for sa in _sentences(a)
        for sb in _sentences(b)
        # sentences that both carry claims were compared by the rules above
        if not (sa in parsed and sb in parsed) and (c := _sentence_level(sa, sb))
    ]
    return min(found, key=lambda c: _PRIORITY.index(c.rule)) if found else None


def _two_speakers(a: str, b: str) -> frozenset[str]:
    """The two speakers' names (lowercase) when ``a`` and ``b`` are turns of two different speakers, else none."""
    sa = utterances.split_speaker(utterances.strip_context(a))[0]
    sb = utterances.split_speaker(utterances.strip_context(b))[0]
    if sa is None or sb is None or sa.lower() == sb.lower():
        return frozenset()
    return frozenset((sa.lower(), sb.lower()))


def _third_person(subject: str, speakers: frozenset[str], a: str, b: str) -> bool:
    """Whether ``subject`` is a named third person: neither speaker, written with a capital in both turns."""
    if subject in speakers or subject.split("'")[0] in speakers:
        return False
    name = re.compile(r"\b" + r"\s+".join(w[:1].upper() + re.escape(w[1:]) for w in subject.split()) + r"\b")
    return all(name.search(utterances.split_speaker(utterances.strip_context(t))[1]) for t in (a, b))


def detect_contradictions(pairs: Sequence[tuple[str, str]]) -> list[Contradiction | None]:
    """:func:`detect_contradiction` of each ``(a, b)``. From ``SMALL_BATCH`` pairs on, the rules run only on the
    pairs whose texts share a slot (:func:`contradiction_slots`), found for all pairs at once; every other pair
    is ``None`` without them.

    >>> [c and c.rule for c in detect_contradictions([("User lives in Berlin", "User lives in Bonn"),
    ...                                                ("User lives in Berlin", "The meeting is at 3pm")])]
    ['value_swap', None]
    """
    if len(pairs) < SMALL_BATCH:
        return [detect_contradiction(*pair) for pair in pairs]
    table = TextTable(t for pair in pairs for t in pair)
    a, b = table.rows([x for x, _ in pairs]), table.rows([y for _, y in pairs])
    shared = table.overlap("contradiction_slots", contradiction_slots, a, b)
    return [detect_contradiction(*pair) if k else None for pair, k in zip(pairs, shared.tolist(), strict=True)]


@functools.lru_cache(maxsize=TEXT_CACHE_SIZE)
def contradiction_slots(text: str) -> frozenset[tuple[Any, ...]]:
    """What a text contradicting ``text`` must share with it: :func:`detect_contradiction` fires on ``(a, b)``
    only if ``contradiction_slots(a) & contradiction_slots(b)``. A claim's slot is its subject, relation family
    and tense (``_compare`` compares nothing else); a sentence's are its content tokens without negations (the
    negation rule of ``_sentence_level``) and, when it has numbers, without them (its quantity rule).

    >>> contradiction_slots("User lives in Berlin") & contradiction_slots("I live in Munich") != set()
    True
    """
    slots: set[tuple[Any, ...]] = {
        ("claim", p.claim.subject, _family(p.claim.relation), p.claim.past) for p in _parse(text)
    }
    for sentence in _sentences(text):
        base, _ = _negation_view(sentence)
        if len(base) >= 2:
            slots.add(("negation", base))
        nums, rest = _split_numbers(sentence)
        if nums and len(rest) >= 2:
            slots.add(("quantity", rest))
    return frozenset(slots)
