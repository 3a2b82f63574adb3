"""A labelled multi-session dialogue corpus written for this project, and the figures consolidation is judged by.

Each conversation is one agent's memory of two people talking over many sessions (``Dana: I live in Lisbon,
near the river.``), one episodic memory per turn, sessions days apart. Woven into small talk:

- **facts** about each speaker, said again in other words in two or three sessions (where someone lives,
  works, what they love, hate, own or prefer, what they are training for), each labelled with its speaker
  and its canonical belief ``(subject, relation, value, negated)`` in the terms of
  :func:`tests.corpora.conversations.belief_match`;
- **reported speech** about a third person: where the first speaker's sister lives, in two sessions ("My sister
  told me she lives in Graz now."), a belief about ``dana's sister``, labelled with the first speaker;
- **second person**: the second speaker's app, said once by them ("I use Strava, it changed my life.") and once
  back to them by the first ("You use Strava, I remember."): a belief about the second speaker only if "you"
  is read as them;
- **a routine** of the second speaker's, with its outcome, in two sessions ("When I can't sleep, I read a paper
  book and it worked."): a procedure (``routine`` records);
- **one change of value per conversation** (a move to another city): the older and the newer statements
  are a real contradiction, labelled (``change`` records);
- **cross-speaker turns**: the other speaker answers about their own life in the same words ("The weather is
  awful here." / "The weather is lovely here.", "I don't like hiking." after "I love hiking."): two people
  talking about different things, which must never be flagged.

The corpus is generated from a seed by :func:`generate` (nothing is downloaded); the checked-in copy is
``bench/data/sessions/labelled.jsonl`` (``python bench/data/sessions/generate.py`` writes it, and a test
holds the two equal). Records, one a line, by ``type``:

- ``turn``: ``id, conversation, session, speaker, created_at, content, label`` (``fact`` with ``fact`` id,
  ``routine`` with the routine's id in ``fact``, ``change``, ``cross``, ``small_talk``);
- ``fact``: ``id, conversation, speaker`` (whose fact: their own, or their sister's), ``belief [subject,
  relation, value, negated], sessions, turns``;
- ``change``: ``conversation, older, newer`` (turn ids that really contradict each other);
- ``routine``: ``id, conversation, speaker, procedure [trigger, action], sessions, turns``.

:func:`largest_cluster_share`, :func:`belief_figures` and :func:`contradiction_figures` compute the figures of
issue 34 (``bench/bench_consolidation_quality.py`` prints them; ``tests/lib/lifecycle/test_session_corpus.py`` holds
them).

>>> records = generate(conversations=1, sessions=15)
>>> sum(r["type"] == "turn" for r in records) > 15 * 15, records[0]["type"]
(True, 'turn')
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.corpora.conversations import belief_match, procedure_match
from tests.corpora.dialogues import SLOTS, SMALL_TALK, Question

START = datetime(2026, 2, 2, 19, tzinfo=UTC)
PAIRS = [("Dana", "Leo"), ("Mira", "Jonas"), ("Priya", "Tom"), ("Ines", "Omar"), ("Kai", "Ruth"), ("Noor", "Felix")]
CITIES = ["Lisbon", "Porto", "Leeds", "Ghent", "Bergen", "Valencia", "Krakow", "Tampere", "Graz", "Cork"]
ORGS = ["Northwind", "Globex", "Initech", "Umbrella Health", "Acme Labs", "Blue Harbor", "Vandelay"]
HOBBIES = ["hiking", "pottery", "salsa dancing", "birdwatching", "chess", "woodworking", "rock climbing"]
DISLIKES = ["horror movies", "cilantro", "crowded bars", "jazz", "reality shows", "olives"]
PETS = [("beagle", "Biscuit"), ("tabby cat", "Miso"), ("parrot", "Pepper"), ("corgi", "Noodle"), ("hamster", "Ziggy")]
GOALS = ["nurse", "pilot", "paramedic", "yoga teacher", "sommelier"]
DRINKS = ["green tea", "black coffee", "oat lattes", "sparkling water"]
APPS = ["Strava", "Duolingo", "Notion", "Headspace", "Goodreads"]
ROUTINES = ["drink chamomile tea", "read a paper book", "go for a short walk", "listen to rain sounds"]
ROUTINE = ["When I can't sleep, I {x} and it worked.", "Whenever I can't sleep, I {x}, it worked again."]
SISTER = ["My sister told me she lives in {x} now.", "My sister said she still lives in {x}, near the coast.",
          "My sister lives in {x}, we visit her in spring."]  # fmt: skip

# (template, label value, relation, negated): each fact kind's wordings; {x} is the fact's value
FACT_KINDS: dict[str, tuple[str, bool, list[str]]] = {
    "home": ("lives_in", False, ["I live in {x}, near the river.", "I still live in {x}, the rent keeps rising.",
                                 "I live in {x} now, it finally feels like home."]),
    "job": ("works_at", False, ["I work at {x}, in the data team.", "I still work at {x}, three years now.",
                                "I work at {x} and the new boss is fine."]),
    "hobby": ("likes", False, ["I love {x}, it clears my head.", "I really enjoy {x} on weekends.",
                               "I still love {x}, I did it all Sunday."]),
    "dislike": ("likes", True, ["I don't like {x}, honestly.", "I hate {x}, always have.",
                                "I really don't like {x}."]),
    "pet": ("has", False, ["I have a {x}, he snores all night.", "I have a {x} and he hates the rain.",
                           "I have a {x}, he turned five last week."]),
    "goal": ("is", False, ["I'm training to be a {x}.", "I'm still training to be a {x}, exams are in spring.",
                           "I'm training to be a {x}, the night shifts are hard."]),
    "drink": ("prefers", False, ["I prefer {x} in the morning.", "I prefer {x}, it's just better.",
                                 "I still prefer {x} over anything else."]),
}  # fmt: skip
OPTIONAL = ("dislike", "pet", "goal", "drink")

# Speaker-relative small talk: the second line is the other speaker about their own life, in the same words.
CROSS = [
    ("The weather is awful here.", "The weather is lovely here."),
    ("Work is crazy this week.", "Work is quiet this week."),
    ("Our landlord is strict.", "Our landlord is so relaxed."),
    ("The new job is going great.", "The new job is not going great, honestly."),
    ("We have 2 weddings this month.", "We have 3 weddings this month."),
    ("The kids are sleeping well.", "The kids are not sleeping well."),
    ("The commute is 20 minutes.", "The commute is 45 minutes."),
    ("My back is fine now.", "My back is not fine."),
]
# one question per fact kind, whose evidence is the turns that state the fact (after a change, the newer ones)
QUESTIONS = {
    "home": "Where does {who} live?",
    "job": "Where does {who} work?",
    "hobby": "What does {who} love doing?",
    "dislike": "What does {who} dislike?",
    "pet": "What pet does {who} have?",
    "goal": "What is {who} training to be?",
    "drink": "What does {who} prefer to drink?",
    "sister": "Where does {who}'s sister live?",
    "app": "Which app does {who} use?",
}
GREETINGS = ["Hey {other}! How was your week?", "Hi {other}, good to hear from you.", "Evening {other}!"]
CLOSINGS = ["Talk soon!", "Okay, I have to run. Bye!", "Good night, speak next week."]


Line = tuple[str, str, str, str | None]  # speaker, text, label, fact id


def _value(kind: str, rng: random.Random) -> str:
    if kind == "pet":
        pet, name = rng.choice(PETS)
        return f"{pet} named {name}"
    pool = {"home": CITIES, "job": ORGS, "hobby": HOBBIES, "dislike": DISLIKES, "goal": GOALS, "drink": DRINKS}
    return rng.choice(pool[kind])


def _small_talk(rng: random.Random) -> str:
    return rng.choice(SMALL_TALK).format(**{k: rng.choice(v) for k, v in SLOTS.items()})


def generate(
    *, conversations: int = 3, sessions: int = 16, seed: int = 34, start: datetime = START
) -> list[dict[str, Any]]:
    """The corpus as records (see the module docstring): ``conversations`` two-person conversations of
    ``sessions`` sessions each, deterministic for a seed."""
    if not 1 <= conversations <= len(PAIRS) or sessions < 6:
        raise ValueError(f"need 1..{len(PAIRS)} conversations and at least 6 sessions")
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for a, b in PAIRS[:conversations]:
        conv = f"{a.lower()}-{b.lower()}"
        plan: list[list[Line]] = [[] for _ in range(sessions)]
        facts: list[dict[str, Any]] = []
        used: dict[str, set[str]] = {}
        for speaker in (a, b):
            kinds = ["home", "job", "hobby", *rng.sample(OPTIONAL, k=2)]
            for kind in kinds:
                taken = used.setdefault(kind, set())
                value = _value(kind, rng)
                while value in taken:  # the two speakers never share a value: a fact is about one of them
                    value = _value(kind, rng)
                taken.add(value)
                relation, negated, wordings = FACT_KINDS[kind]
                fid = f"{conv}-{speaker.lower()}-{kind}"
                moved = kind == "home" and speaker == a
                where = sorted(rng.sample(range(sessions // 2 if moved else sessions), k=rng.choice([2, 3])))
                for s, wording in zip(where, rng.sample(wordings, k=len(where)), strict=True):  # in other words
                    plan[s].append((speaker, wording.format(x=value), "fact", fid))
                label = {"pet": value.split(" named ")[0], "goal": f"training to be a {value}"}.get(kind, value)
                if moved:  # a real change: the first speaker moves in the second half
                    new = rng.choice([c for c in CITIES if c not in taken])
                    taken.add(new)
                    when = rng.randrange(sessions // 2, sessions - 2)
                    plan[when].append((speaker, f"I moved from {value} to {new} last week!", "change", fid))
                    after = sorted(rng.sample(range(when + 1, sessions), k=2))
                    for s, wording in zip(after, rng.sample(wordings, k=2), strict=True):
                        plan[s].append((speaker, wording.format(x=new), "fact", fid))
                    label = new
                facts.append({"type": "fact", "id": fid, "conversation": conv, "speaker": speaker,
                              "belief": [speaker.lower(), relation, label.lower(), negated]})  # fmt: skip
        # reported speech: where the first speaker's sister lives (a city no speaker lives in), in two sessions
        city = rng.choice([c for c in CITIES if c not in used["home"]])
        fid = f"{conv}-{a.lower()}-sister"
        for s, wording in zip(sorted(rng.sample(range(sessions), k=2)), rng.sample(SISTER, k=2), strict=True):
            plan[s].append((a, wording.format(x=city), "fact", fid))
        facts.append({"type": "fact", "id": fid, "conversation": conv, "speaker": a,
                      "belief": [f"{a.lower()}'s sister", "lives_in", city.lower(), False]})  # fmt: skip
        # second person: the second speaker's app, said by them, and said back to them by the first speaker
        app = rng.choice(APPS)
        fid = f"{conv}-{b.lower()}-app"
        first, later = sorted(rng.sample(range(sessions), k=2))
        plan[first].append((b, f"I use {app}, it changed my life.", "fact", fid))
        plan[later].append((a, f"You use {app}, I remember.", "fact", fid))
        facts.append({"type": "fact", "id": fid, "conversation": conv, "speaker": b,
                      "belief": [b.lower(), "uses", app.lower(), False]})  # fmt: skip
        # a routine of the second speaker's that worked, in two sessions: a procedure
        routine = rng.choice(ROUTINES)
        rid = f"{conv}-{b.lower()}-routine"
        for s, wording in zip(sorted(rng.sample(range(sessions), k=2)), ROUTINE, strict=True):
            plan[s].append((b, wording.format(x=routine), "routine", rid))
        routines = [{"type": "routine", "id": rid, "conversation": conv, "speaker": b,
                     "procedure": [f"{b} can't sleep", routine]}]  # fmt: skip
        # each speaker keeps their side of a cross pair all along (said again, it is the same state, not a change)
        sides = {pair: rng.sample([a, b], k=2) for pair in CROSS}
        for s in rng.sample(range(sessions), k=min(sessions, 2 * len(CROSS))):
            pair = rng.choice(CROSS)
            order = [0, 1] if rng.random() < 0.5 else [1, 0]
            for k in order:
                plan[s].append((sides[pair][k], pair[k], "cross", None))
        # the second speaker dislikes, right after, what the first one loves
        hobby = next(f for f in facts if f["id"] == f"{conv}-{a.lower()}-hobby")["belief"][2]
        s = rng.randrange(sessions)
        plan[s] += [(a, f"I love {hobby}, honestly.", "cross", None), (b, f"I don't like {hobby}.", "cross", None)]

        at = start
        turns: dict[str, list[str]] = {}
        for s in range(sessions):
            at += timedelta(days=rng.randint(2, 6), minutes=rng.randint(-90, 90))
            body = list(plan[s])
            blocks: list[list[Line]] = []
            i = 0
            while i < len(body):  # a cross pair stays adjacent
                take = 2 if body[i][2] == "cross" and i + 1 < len(body) and body[i + 1][2] == "cross" else 1
                blocks.append(body[i : i + take])
                i += take
            size = rng.randint(20, 26)
            while sum(map(len, blocks)) < size:
                blocks.append([(rng.choice([a, b]), _small_talk(rng), "small_talk", None)])
            rng.shuffle(blocks)
            opener = rng.choice([a, b])
            other = b if opener == a else a
            lines: list[Line] = [(opener, rng.choice(GREETINGS).format(other=other), "small_talk", None)]
            lines += [line for block in blocks for line in block]
            lines.append((rng.choice([a, b]), rng.choice(CLOSINGS), "small_talk", None))
            t = at
            for n, (speaker, text, label, said) in enumerate(lines):
                t += timedelta(minutes=rng.randint(1, 3))
                tid = f"{conv}-s{s:02d}-t{n:03d}"
                record = {"type": "turn", "id": tid, "conversation": conv, "session": s, "speaker": speaker,
                          "created_at": t.isoformat(), "content": f"{speaker}: {text}", "label": label}  # fmt: skip
                if said:
                    record["fact"] = said
                    turns.setdefault(said, []).append(tid)
                out.append(record)
        for f in (*facts, *routines):
            f["sessions"] = sorted({int(t.split("-s")[1][:2]) for t in turns[f["id"]]})
            f["turns"] = turns[f["id"]]
        out += facts + routines
        mover = f"{conv}-{a.lower()}-home"
        change = next(r for r in out if r.get("fact") == mover and r["label"] == "change")
        older = [t for t in turns[mover] if t < change["id"]]
        newer = [t for t in turns[mover] if t >= change["id"]]
        out.append({"type": "change", "conversation": conv, "older": older, "newer": newer})
    return out


def questions(records: Sequence[Mapping[str, Any]], *, suffix: str = "") -> list[Question]:
    """A question per labelled fact (:data:`QUESTIONS`) with its evidence turns, for
    :func:`tests.corpora.dialogues.evidence_recall`."""
    newer = {c["conversation"]: set(c["newer"]) for c in records if c["type"] == "change"}
    out = []
    for f in (r for r in records if r["type"] == "fact"):
        kind = f["id"].rsplit("-", 1)[1]
        moved = [t for t in f["turns"] if t in newer.get(f["conversation"], set())]
        evidence = tuple(t + suffix for t in (moved or f["turns"]))
        text = QUESTIONS[kind].format(who=f["speaker"])
        out.append(
            Question(f["id"] + suffix, f["conversation"] + suffix, text, "changed" if moved else "restated", evidence)
        )
    return out


def provenance_recall(store: Any, questions: Sequence[Question], *, now: datetime, k: int = 10) -> float:
    """Share of ``questions`` whose first ``k`` hits hold an evidence turn, carry one as evidence, or hold a derived
    row (a belief) linked ``derived-from`` to one, wherever that turn ranks: a hit counts with everything it
    stands on. :func:`tests.corpora.dialogues.evidence_recall` counts only the first ``k`` ids, the turns a hit
    carries included."""
    found = 0
    for q in questions:
        hits = store.recall(q.agent_id, q.text, k=k, now=now, track_access=False, with_vectors=False)
        ids = {m["id"] for h in hits for m in (h.memory, *h.evidence)}
        derived = [h.memory["id"] for h in hits if h.memory.get("source") == "derived"]
        ids |= {link["dst_id"] for link in store.engine.links_of(derived, rel="derived-from")} if derived else set()
        found += bool(ids & set(q.evidence))
    return found / len(questions) if questions else 0.0


def load(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def dump(records: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def import_lines(records: Sequence[Mapping[str, Any]], *, suffix: str = "") -> list[dict[str, Any]]:
    """The turns as import lines: agent ``conversation + suffix``, one episode per turn, ids kept."""
    return [
        {
            "id": r["id"] + suffix,
            "agent_id": r["conversation"] + suffix,
            "content": r["content"],
            "kind": "episodic",
            "source": "user",
            "created_at": r["created_at"],
        }
        for r in records
        if r["type"] == "turn"
    ]


def largest_cluster_share(clusters: Sequence[Sequence[str]], turns: int) -> float:
    """The share of a conversation's ``turns`` held by its largest episode cluster."""
    return max((len(c) for c in clusters), default=0) / turns if turns else 0.0


@dataclass(frozen=True)
class BeliefFigures:
    derived: int  # derived beliefs
    matched: int  # derived beliefs that say a labelled fact about its speaker
    recurring: int  # labelled facts said in two or more sessions
    covered: int  # of those, the facts some derived belief says

    @property
    def precision(self) -> float:
        return self.matched / self.derived if self.derived else 0.0

    @property
    def coverage(self) -> float:
        return self.covered / self.recurring if self.recurring else 0.0


def belief_figures(beliefs: Sequence[Mapping[str, Any]], facts: Sequence[Mapping[str, Any]]) -> BeliefFigures:
    """Precision of derived belief rows against the labelled ``facts`` of their conversation, and coverage of
    the facts that recur in two or more sessions."""
    labels = [tuple(f["belief"]) for f in facts]
    matched = sum(any(belief_match(lab, dict(row)) for lab in labels) for row in beliefs)
    recurring = [lab for lab, f in zip(labels, facts, strict=True) if len(f["sessions"]) >= 2]
    covered = sum(any(belief_match(lab, dict(row)) for row in beliefs) for lab in recurring)
    return BeliefFigures(len(beliefs), matched, len(recurring), covered)


def routines_covered(procedures: Sequence[Mapping[str, Any]], routines: Sequence[Mapping[str, Any]]) -> int:
    """How many labelled ``routines`` some derived procedure row says (its trigger and action)."""
    return sum(any(procedure_match(tuple(r["procedure"]), dict(p)) for p in procedures) for r in routines)


@dataclass(frozen=True)
class ContradictionFigures:
    turns: int
    falsely_flagged: int  # turns flagged against a turn they do not really contradict
    changes: int  # labelled changes of value
    changes_flagged: int  # of those, flagged between an older and a newer statement

    @property
    def false_rate(self) -> float:
        return self.falsely_flagged / self.turns if self.turns else 0.0


def contradiction_figures(
    rows: Sequence[Mapping[str, Any]], changes: Sequence[Mapping[str, Any]]
) -> ContradictionFigures:
    """Flags among a conversation's episode ``rows`` (``contradiction_with``; the default policy ``flag``) against
    the labelled ``changes``: a flag is true only between an older and a newer statement of one change."""
    real = {frozenset((o, n)) for c in changes for o in c["older"] for n in c["newer"]}
    turns = [r for r in rows if r["kind"] == "episodic"]
    false = 0
    hit: set[frozenset[str]] = set()
    for r in turns:
        pairs = {frozenset((r["id"], o)) for o in r.get("contradiction_with") or []}
        hit |= pairs & real
        false += bool(pairs - real)
    flagged = sum(any(frozenset((o, n)) in hit for o in c["older"] for n in c["newer"]) for c in changes)
    return ContradictionFigures(len(turns), false, len(changes), flagged)
