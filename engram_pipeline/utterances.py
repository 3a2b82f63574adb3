"""Episode text as agents record it, read into plain sentences the claim patterns understand.

Real episodes are dialogue turns, session notes and tool logs, not tidy facts:

- context prefixes (``Session 3:``, ``[2023-05-08]``, ``2023-05-08 14:02 -``, ``(turn 12)``) say when, not what:
  they are dropped;
- a speaker prefix (``Kim: I prefer ...``, ``Caroline: my editor is ...``) names who "I" and "my" are: first
  person becomes the speaker (without a speaker, the user);
- reported speech (``Kim said she prefers ...``, ``the user mentioned that they ...``, ``Kim told me he's ...``,
  ``Dana: my sister told me she ...``) resolves the pronoun to the reporting subject ("Dana's sister");
- second person, in a turn of a two-person conversation whose other speaker is known (``listener``: see
  :func:`listeners`), is that other speaker: ``Leo: You still work at Globex.`` says Dana works at Globex; without
  a listener "you" stays a pronoun, which gives no claim;
- hedges (``I think``, ``maybe``, ``probably``) are dropped from the sentence and kept as a mark;
- tense: ``used to X`` is a past claim, ``switched / moved / changed (from A) to B`` is a change: the new value
  now, and the old one no longer.

:func:`read` returns :class:`Sentence` objects (the rewritten text and its marks) that
:func:`engram_pipeline.claims.parse_claims` parses; :func:`strip_context` is what procedure detection uses.

>>> [s.text for s in read("Session 3: Kim said she prefers dark mode in every editor")]
['Kim prefers dark mode in every editor']
>>> [(s.text, s.changed) for s in read("Kim: I switched from vim to emacs.")]
[('Kim uses emacs.', True), ('Kim no longer uses vim.', True)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CONTEXT = re.compile(
    r"^\s*(?:"
    r"\[[^\]]{1,40}\]"  # [2023-05-08], [10:32], [session 4]
    r"|\((?:turn|session|day)\s*\d+\)"  # (turn 12)
    r"|(?:session|day|turn|entry|log|note)\s*#?\d+\s*[:.\-]"  # Session 3:, Day 2 -
    r"|\d{4}-\d{2}-\d{2}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?\s*[:\-]?"  # 2023-05-08 14:02 -
    r"|\d{1,2}:\d{2}\s*[:\-]"  # 14:02 -
    r")\s*",
    re.IGNORECASE,
)
# "Kim: ..." or "Dr. Lee: ..." -- a capitalised name of one or two words, then a colon.
_SPEAKER = re.compile(r"^(?P<name>(?:[A-Z][\w'.-]*)(?: [A-Z][\w'.-]*)?)\s*:\s+(?P<rest>\S.*)$")
_ANY_SPEAKER = re.compile(r"^(?P<name>[\w'.-]+(?: [\w'.-]+)?)\s*:\s+(?P<rest>\S.*)$")
_SPEAKS = re.compile(r"\b(?:I|I'm|I've|I'd|my|My|me|we|We|our|Our)\b")
_NOT_SPEAKERS = frozenset(
    {"i", "me", "my", "we", "note", "todo", "summary", "error", "warning", "info", "update", "fact", "user", "agent"}
)
_REPORT_VERBS = (
    r"said|says|mentioned|mentions|told (?:me|us|him|her|them)|tells (?:me|us)|explained|noted|added|stated|"
    r"shared|admitted|claimed|reported|confirmed|wrote|writes|replied"
)
# Reporting verbs that are never an adjective ("the shared drive", "the reported bug" are not reports): a claim
# subject holding one after its first word is a report the patterns did not resolve ("kim said you").
REPORTING = frozenset({"said", "says", "told", "tells", "mentioned", "mentions"})
_REPORTED = re.compile(
    rf"^(?P<who>.+?)\s+(?:{_REPORT_VERBS})(?:\s+that)?\s*,?\s+(?P<pron>she's|he's|they're|she|he|they|it|his|her|their)\b\s*"
    rf"(?P<rest>.*)$",
    re.IGNORECASE,
)
_QUOTED = re.compile(
    rf"^(?P<who>.+?)\s+(?:{_REPORT_VERBS})\s*[:,]?\s*[\"\u201c](?P<rest>[^\"\u201d]+)[\"\u201d]\s*\.?$"
)
_HEDGES = re.compile(
    r"^(?:(?:i think|i guess|i believe|i suppose|i feel like|i'd say|maybe|perhaps|probably|possibly|"
    r"apparently|kind of|sort of)(?:\s+that)?\s*,?\s+)+",
    re.IGNORECASE,
)
_USED_TO = re.compile(r"\bused to\s+(?P<verb>\w+)", re.IGNORECASE)
_CHANGE = re.compile(
    r"^(?P<subj>.+?)\s+(?:have\s+|has\s+|just\s+|recently\s+|finally\s+|already\s+|eventually\s+)*"
    r"(?P<verb>switched|changed|moved|converted|migrated)(?:\s+over)?"
    r"(?:\s+from\s+(?P<old>.+?))?\s+to\s+(?P<new>.+?)(?P<end>[.!;]?)$",
    re.IGNORECASE,
)
_FIRST_PERSON = (
    (re.compile(r"\bI'm\b", re.IGNORECASE), "{who} is"),
    (re.compile(r"\bI've\b", re.IGNORECASE), "{who} has"),
    (re.compile(r"\bI'd\b", re.IGNORECASE), "{who} would"),
    (re.compile(r"\bI am\b"), "{who} is"),
    (re.compile(r"\bI\b"), "{who}"),
    (re.compile(r"\b(?:my|My)\b"), "{whose}"),
    (re.compile(r"\b(?:me|myself)\b"), "{who}"),
)
_SECOND_PERSON = (
    (re.compile(r"\b(?:you're|you are)\b", re.IGNORECASE), "{who} is"),
    (re.compile(r"\byou've\b", re.IGNORECASE), "{who} has"),
    (re.compile(r"\byou'd\b", re.IGNORECASE), "{who} would"),
    (re.compile(r"\byour\b", re.IGNORECASE), "{whose}"),
    (re.compile(r"\b(?:you|yourself)\b", re.IGNORECASE), "{who}"),
)
_FIRST_PERSON_CLAUSE = re.compile(r",\s+(?=(?:I|I'm|I've|my|My)\b)")
_THIRD_PERSON = {"she's": "is", "he's": "is", "they're": "are"}
# verbs to put in the third person after a resolved subject ("I prefer" -> "Kim prefers")
_VERB_3RD = re.compile(
    r"^(?P<subj>\S+(?: \S+)?) (?P<verb>prefer|like|love|enjoy|use|live|work|have|own|hate|dislike|avoid|drink|"
    r"eat|play|commute|go)\b"
)


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?!\d)|\n+")


def split_sentences(text: str) -> list[str]:
    """``text`` cut into sentences (the one splitter every text rule uses)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


@dataclass(frozen=True)
class Sentence:
    """One sentence rewritten for the claim patterns, with what the rewriting removed."""

    text: str
    speaker: str | None = None  # the turn's speaker, if it named one
    hedged: bool = False
    past: bool = False
    changed: bool = False  # a change of value ("switched to", "moved to"): newer than what came before


def strip_context(text: str) -> str:
    """``text`` without its leading context prefixes (session, date, time, turn)."""
    out = text
    while True:
        stripped = _CONTEXT.sub("", out, count=1)
        if stripped == out:
            return out.strip()
        out = stripped


def split_speaker(text: str) -> tuple[str | None, str]:
    """``("Kim", "I prefer ...")`` for a speaker-prefixed turn, else ``(None, text)``.

    ``Name: rest`` is a turn when the rest speaks (first person, reported speech, an exclamation or a question:
    ``Dana: Talk soon!``) or is a sentence of three words or more; ``Editor: vim`` stays a copular fact ("the
    editor is vim").
    """
    m = _SPEAKER.match(text)
    if not m or m["name"].lower() in _NOT_SPEAKERS:
        return None, text
    rest = m["rest"]
    speaks = _SPEAKS.search(rest) or _REPORTED.match(rest) or len(rest.split()) >= 3 or rest.endswith(("!", "?"))
    return (m["name"], rest) if speaks else (None, text)


def drop_speaker(text: str) -> str:
    """``text`` without a leading ``Name:`` of one or two words, whoever it names (a log's ``agent:`` too)."""
    m = _SPEAKER.match(text) or _ANY_SPEAKER.match(text)
    return m["rest"] if m else text


def read(text: str, listener: str | None = None) -> list[Sentence]:
    """The sentences of an episode, rewritten (see the module docstring). ``listener``: who "you" is in a turn
    (the other speaker of a two-person conversation, :func:`listeners`); it is used only in a turn that names
    its speaker, and never for the speaker themselves.

    >>> [s.text for s in read("Leo: You still work at Globex.", listener="Dana")]
    ['Dana still works at Globex.']
    """
    speaker, body = split_speaker(strip_context(text))
    if speaker is None or (listener or "").lower() == speaker.lower():
        listener = None
    out: list[Sentence] = []
    for raw in split_sentences(body):
        for clause in _FIRST_PERSON_CLAUSE.split(raw):  # "I love it, I live in Lisbon": two statements
            out += _rewrite(clause, speaker, listener)
    return out


def listeners(texts: list[str]) -> list[str | None]:
    """For each text, who "you" is: the other speaker when the texts are turns of exactly two speakers (one
    agent's memory of a two-person conversation), else nobody.

    >>> listeners(["Dana: Hi Leo!", "Leo: You still live in Lisbon.", "a note"])
    ['Leo', 'Dana', None]
    """
    speakers = [split_speaker(strip_context(t))[0] for t in texts]
    names = {n.lower(): n for n in speakers if n is not None}
    if len(names) != 2:
        return [None] * len(texts)
    a, b = sorted(names)
    return [None if n is None else names[b if n.lower() == a else a] for n in speakers]


def _rewrite(sentence: str, speaker: str | None, listener: str | None = None) -> list[Sentence]:
    s = sentence.strip()
    hedged = bool(_HEDGES.match(s))
    s = _HEDGES.sub("", s)
    quoted = _QUOTED.match(s)
    if quoted:  # Kim said: "I prefer tea"
        return _rewrite(quoted["rest"], quoted["who"].strip())  # "I" inside the quote is whoever said it
    persons = {"i", "user", "the user", (speaker or "").lower()}
    reported = _REPORTED.match(s)
    if reported and not _is_pronoun(reported["who"]):
        who = _first_person(reported["who"].strip(), speaker)
        persons.add(who.lower())
        pron = reported["pron"].lower()
        rest = reported["rest"]
        if pron in ("his", "her", "their"):  # "Ravi said his team uses Airflow" -> "Ravi's team uses Airflow"
            s = f"{who}'s {rest}".strip()
        else:
            verb = _THIRD_PERSON.get(pron)
            s = _third_person_verb(f"{who} {verb + ' ' if verb else ''}{rest}".strip())
    else:
        s = _second_person(_first_person(s, speaker), listener)
        if listener is not None:
            persons.add(listener.lower())
    past = bool(_USED_TO.search(s))
    if past:
        s = _third_person_verb(_USED_TO.sub(lambda m: m["verb"], s))
    change = _CHANGE.match(s)
    if change and change["subj"].lower() in persons:  # a person switched or moved ("the standup moved" did not)
        subj, verb, old, new, end = change["subj"], change["verb"].lower(), change["old"], change["new"], change["end"]
        relation = "lives in" if verb == "moved" else "uses"
        new = re.sub(r"^(?:living|using)\s+", "", new)
        out = [Sentence(f"{subj} {relation} {new}{end}", speaker, hedged, False, True)]
        if old:
            out.append(Sentence(f"{subj} no longer {relation} {old}{end}", speaker, hedged, False, True))
        return out
    return [Sentence(s, speaker, hedged, past, False)]


def _is_pronoun(word: str) -> bool:
    return word.strip().lower() in {"she", "he", "they", "it", "we", "you", "this", "that"}


def first_person(s: str, speaker: str | None) -> str:
    """``s`` with its first person rewritten to ``speaker`` (``I can't sleep`` -> ``Kim can't sleep``); unchanged
    without a speaker."""
    return _first_person(s, speaker)


def _first_person(s: str, speaker: str | None) -> str:
    """First person rewritten to the speaker (``I prefer`` -> ``Kim prefers``); unchanged without a speaker,
    where the claim parser reads "I" as the user."""
    if speaker is None:
        return s
    out = s
    for pattern, repl in _FIRST_PERSON:
        out = pattern.sub(repl.format(who=speaker, whose=f"{speaker}'s"), out)
    return _third_person_verb(out) if out != s else out


def _second_person(s: str, listener: str | None) -> str:
    """Second person rewritten to the ``listener`` (``You still work at`` -> ``Dana still works at``)."""
    if listener is None:
        return s
    out = s
    for pattern, repl in _SECOND_PERSON:
        out = pattern.sub(repl.format(who=listener, whose=f"{listener}'s"), out)
    return _third_person_verb(out) if out != s else out


def _third_person_verb(s: str) -> str:
    m = _VERB_3RD.match(s)
    if not m or m["subj"].lower() in ("i", "you", "we", "they"):
        return s
    verb = m["verb"]
    third = "has" if verb == "have" else verb + ("es" if verb.endswith(("o", "sh", "ch")) else "s")
    return s[: m.start("verb")] + third + s[m.end("verb") :]
