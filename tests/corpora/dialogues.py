"""A multi-session dialogue corpus written for this project, with questions whose evidence turns are known.

Each agent is the memory of one person talking with a friend over several sessions, one episodic memory per
turn (``"Kim: I adopted a beagle named Biscuit last spring."``). Woven into small talk are facts of three
sorts, each with a question and the turns that answer it:

- ``once``: stated in one turn and never again (a pet's name, an allergy, a hometown);
- ``restated``: stated in two or three sessions, in different words (a job, a hobby);
- ``changed``: a change of mind (coffee, then green tea); the evidence is the newer turn only.

Everything is generated from a seed, so a corpus is the same on every machine and nothing is downloaded.
The time-safety test (``tests/lib/lifecycle/test_time_safety.py``) and ``bench/bench_decay_safety.py`` import it,
run the pipeline at later times and measure whether the questions still find their evidence.

>>> corpus = dialogue_corpus(agents=1, sessions=4, turns_per_session=10)
>>> corpus.turns[0]["agent_id"], corpus.questions[0].kind in ("once", "restated", "changed")
('kim', True)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

START = datetime(2026, 1, 5, 18, tzinfo=UTC)  # first session of every agent
SESSION_GAP_DAYS = 4

PEOPLE = ["Kim", "Ravi", "Lena", "Tomas", "Aiko", "Marta", "Dev", "Noor", "Felix", "Grace", "Omar", "Ines"]
FRIENDS = ["Sam", "Jo", "Alex", "Robin", "Chris", "Pat", "Lee", "Max", "Kai", "Drew", "Sky", "Ash"]

# Small talk: templates with slots, so that noise is varied (a real conversation rarely repeats a line word
# for word) and shares words with the facts (a pet, a job, a city come up in passing too).
SMALL_TALK = [
    "How was your {day}?",
    "Haha, that {thing} sounds fun!",
    "Oh no, that's rough about the {thing}.",
    "Did you catch the {event} on {day}?",
    "I'm so {feeling} this week, honestly.",
    "Let's grab {meal} on {day}.",
    "Thanks for listening about the {thing}, really.",
    "That {thing} is a great idea, tell me more.",
    "The weather in {place} has been so strange lately.",
    "Work has been {feeling} but fine.",
    "We should plan a trip to {place} together.",
    "Have you tried the new {meal} place near {place}?",
    "My {thing} keeps breaking, it's driving me nuts.",
    "I finally sorted out the {thing} on {day}.",
    "Traffic near {place} was terrible on {day}.",
    "Same here, what a {day}.",
    "Good luck with the {event}!",
    "I'll send you the link about the {event} later.",
    "Wow, I didn't know that about {place}.",
    "My neighbour's {animal} was barking all {day}.",
    "I saw a video of a {animal} doing {thing} tricks.",
    "Are you going to the {event} in {place}?",
]
SLOTS = {
    "day": ["weekend", "Monday", "Friday", "morning", "evening", "holiday", "birthday", "afternoon"],
    "thing": ["phone", "laptop", "podcast", "garden", "recipe", "bike lock", "printer", "playlist", "sofa", "app"],
    "event": ["game", "concert", "match", "premiere", "festival", "meetup", "wedding", "marathon", "quiz night"],
    "feeling": ["tired", "busy", "stressed", "excited", "distracted", "relaxed", "sleepy"],
    "meal": ["lunch", "ramen", "tacos", "brunch", "pizza", "dim sum", "coffee"],
    "place": ["the station", "downtown", "the park", "the coast", "the mall", "the old town", "the lake"],
    "animal": ["dog", "cat", "parrot", "puppy", "goat", "rabbit"],
}


def _small_talk(rng: random.Random) -> str:
    template = rng.choice(SMALL_TALK)
    return template.format(**{k: rng.choice(v) for k, v in SLOTS.items()})


Statements = list[str]
Fact = tuple[str, Statements, str]  # (kind, statements in the order they are said, question)


def _pet(rng: random.Random, who: str) -> Fact:
    animal = rng.choice(["beagle", "tabby cat", "parrot", "corgi", "hamster", "greyhound"])
    name = rng.choice(["Biscuit", "Miso", "Pepper", "Noodle", "Ziggy", "Waffles", "Juniper"])
    return (
        "once",
        [f"I adopted a {animal} named {name} last spring."],
        f"What is the name of {who}'s {animal}?",
    )


def _allergy(rng: random.Random, who: str) -> Fact:
    thing = rng.choice(["peanuts", "shellfish", "penicillin", "bee stings", "sesame"])
    return ("once", [f"I found out I'm allergic to {thing}, so I carry medication now."], f"What is {who} allergic to?")


def _hometown(rng: random.Random, who: str) -> Fact:
    city = rng.choice(["Lisbon", "Osaka", "Denver", "Krakow", "Nairobi", "Valparaiso", "Tampere"])
    return ("once", [f"I grew up in {city}, right next to the old harbour."], f"Which city did {who} grow up in?")


def _sibling(rng: random.Random, who: str) -> Fact:
    rel = rng.choice(["younger brother", "older sister", "twin brother", "little sister"])
    name = rng.choice(["Theo", "Ana", "Bruno", "Clara", "Yusuf", "Mina"])
    return ("once", [f"My {rel} {name} is moving in with me next month."], f"What is the name of {who}'s {rel}?")


def _book(rng: random.Random, who: str) -> Fact:
    title = rng.choice(["The Overstory", "Piranesi", "Project Hail Mary", "Circe", "The Dispossessed"])
    return ("once", [f"I just finished reading {title} and cried at the ending."], f"Which book did {who} finish?")


def _job(rng: random.Random, who: str) -> Fact:
    role, place = rng.choice(
        [
            ("nurse", "the children's hospital"),
            ("data engineer", "a logistics startup"),
            ("pastry chef", "a bakery downtown"),
            ("architect", "a small design studio"),
            ("high school teacher", "Lincoln High"),
        ]
    )
    said = [
        f"I work as a {role} at {place}.",
        f"Being a {role} is exhausting some days, but I love my job.",
        f"My boss at {place} asked me to train the new {role}s.",
    ]
    return ("restated", rng.sample(said, k=rng.choice([2, 3])), f"What is {who}'s job?")


def _hobby(rng: random.Random, who: str) -> Fact:
    hobby = rng.choice(["pottery", "rock climbing", "salsa dancing", "birdwatching", "chess", "woodworking"])
    said = [
        f"I started {hobby} classes on Tuesday evenings.",
        f"My {hobby} group meets every weekend now, it's my favourite thing.",
        f"I've been practising {hobby} a lot, I'm getting better.",
    ]
    return ("restated", rng.sample(said, k=rng.choice([2, 3])), f"What hobby does {who} do?")


def _drink(rng: random.Random, who: str) -> Fact:
    old, new = rng.choice([("coffee", "green tea"), ("black tea", "yerba mate"), ("espresso", "herbal tea")])
    return (
        "changed",
        [f"I drink {old} every single morning.", f"I switched from {old} to {new} in the mornings."],
        f"What does {who} drink in the mornings now?",
    )


def _commute(rng: random.Random, who: str) -> Fact:
    old, new = rng.choice([("bike", "train"), ("car", "bike"), ("bus", "scooter")])
    return (
        "changed",
        [f"I commute to work by {old}.", f"I stopped taking the {old}, now I go to work by {new}."],
        f"How does {who} get to work now?",
    )


FACTS: Sequence[Callable[[random.Random, str], Fact]] = (
    _pet,
    _allergy,
    _hometown,
    _sibling,
    _book,
    _job,
    _hobby,
    _drink,
    _commute,
)


@dataclass(frozen=True)
class Question:
    id: str
    agent_id: str
    text: str
    kind: str  # once | restated | changed
    evidence: tuple[str, ...]  # ids of the turns that answer it


@dataclass(frozen=True)
class Corpus:
    turns: list[dict[str, Any]]  # import lines: id, agent_id, content, kind, source, created_at (ISO)
    questions: list[Question]
    start: datetime
    end: datetime  # one day after the last session: "now" right after the conversations


def dialogue_corpus(
    *, agents: int = 10, sessions: int = 12, turns_per_session: int = 50, seed: int = 7, start: datetime = START
) -> Corpus:
    """A deterministic corpus of ``agents`` x ``sessions`` x ``turns_per_session`` turns (see the module doc)."""
    if not 1 <= agents <= len(PEOPLE):
        raise ValueError(f"agents must be within 1..{len(PEOPLE)}; got {agents}")
    if sessions < 2 or turns_per_session < 6:
        raise ValueError("need at least 2 sessions of 6 turns (facts are spread over sessions)")
    rng = random.Random(seed)
    turns: list[dict[str, Any]] = []
    questions: list[Question] = []
    last = start
    for a in range(agents):
        who, friend = PEOPLE[a], FRIENDS[a]
        agent = who.lower()
        # (session, speaker, text, fact index or None)
        slots: list[list[tuple[str, str, int | None]]] = [[] for _ in range(sessions)]
        facts = [make(rng, who) for make in FACTS]
        for f, (_kind, said, _q) in enumerate(facts):
            where = sorted(rng.sample(range(sessions), k=len(said)))
            for s, text in zip(where, said, strict=True):
                slots[s].append((who, text, f))
        evidence: dict[int, list[str]] = {f: [] for f in range(len(facts))}
        for s in range(sessions):
            lines = list(slots[s])
            while len(lines) < turns_per_session:
                speaker = rng.choice([who, friend])
                text = _small_talk(rng)
                lines.append((speaker, text, None))
            rng.shuffle(lines)
            at = start + timedelta(days=s * SESSION_GAP_DAYS)
            for t, (speaker, text, fact) in enumerate(lines):
                tid = f"{agent}-s{s:02d}-t{t:03d}"
                created = at + timedelta(minutes=t)
                last = max(last, created)
                turns.append(
                    {
                        "id": tid,
                        "agent_id": agent,
                        "content": f"{speaker}: {text}",
                        "kind": "episodic",
                        "source": "user",
                        "tier": "auto",
                        "created_at": created.isoformat(),
                    }
                )
                if fact is not None:
                    evidence[fact].append(tid)
        for f, (kind, _said, question) in enumerate(facts):
            ids = evidence[f][-1:] if kind == "changed" else evidence[f]
            questions.append(Question(f"{agent}-q{f}", agent, question, kind, tuple(ids)))
    return Corpus(turns, questions, start, last + timedelta(days=1))


def ranked_ids(hits: Sequence[Any]) -> list[str]:
    """Recall hits as a ranked id list: each hit, then the evidence it carries (a derived hit's sources)."""
    out: list[str] = []
    for h in hits:
        for row in (h.memory, *h.evidence):
            if row["id"] not in out:
                out.append(row["id"])
    return out


def evidence_recall(
    store: Any, questions: Sequence[Question], *, now: datetime, ks: Sequence[int] = (5, 10, 20)
) -> dict[int, float]:
    """Share of ``questions`` with at least one evidence turn among the first ``k`` ids of
    :func:`ranked_ids`, for each ``k``. Recall here does not count as an access (nothing is "recalled
    meanwhile")."""
    found = dict.fromkeys(ks, 0)
    for q in questions:
        ids = ranked_ids(store.recall(q.agent_id, q.text, k=max(ks), now=now, track_access=False, with_vectors=False))
        for k in ks:
            found[k] += bool(set(ids[:k]) & set(q.evidence))
    return {k: found[k] / len(questions) if questions else 0.0 for k in ks}
