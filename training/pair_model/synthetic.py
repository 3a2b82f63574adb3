"""Hard pairs written from our own templates: the cases public sets hold too few of.

Every pair is a memory an agent could write, in first person, third person or dialogue ("Dana: ..."), labelled
``same`` (the same fact reworded, or with a detail added or left out), ``contradiction`` (a value swapped, a
number or a date changed, negated, an opposite word, the roles reversed) or ``distinct`` (another subject, or
another thing said about the same subject).

The vocabulary deliberately leaves out the values of the 22-write scenario the tests import (Berlin, Munich,
Jira, dark mode, Python, Tuesday's weekly sync), so no test sentence is generated here.

>>> pairs = generate(seed=0)
>>> sorted({label for _, _, label, _ in pairs})
['contradiction', 'distinct', 'same']
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

SUBJECTS = [
    # (name as subject, possessive, verb agreement: "s" for third person singular, "" for I)
    ("I", "my", ""),
    ("The user", "the user's", "s"),
    ("User", "user's", "s"),
    ("Dana", "Dana's", "s"),
    ("Priya", "Priya's", "s"),
    ("My sister", "my sister's", "s"),
    ("Marco", "Marco's", "s"),
    ("The customer", "the customer's", "s"),
    ("Kenji", "Kenji's", "s"),
    ("Our manager", "our manager's", "s"),
]
PEOPLE = ["Dana", "Priya", "Marco", "Kenji", "Aisha", "Tom", "Lena", "Omar", "Grace", "Felix"]


def _verb(stem: str, agree: str) -> str:
    """``live`` -> ``lives`` for a third person, ``live`` for I; a few irregular stems."""
    if not agree:
        return stem
    irregular = {"have": "has", "do": "does", "go": "goes", "be": "is", "teach": "teaches", "watch": "watches"}
    return irregular.get(stem, stem + "s")


def _mid(subject: str, *, me: bool = False) -> str:
    """The subject inside a sentence: "the user", "Dana", "I" (or "me" as an object)."""
    if subject == "I":
        return "me" if me else "I"
    return subject if subject.split()[0] in PEOPLE else subject.lower()


def _be(agree: str) -> str:
    return "is" if agree else "am"


def _do(agree: str) -> str:
    return "does" if agree else "do"


# Each relation: value pool, a list of templates (rewordings of one fact; {s} subject, {p} possessive, {v} value,
# {V} verb helper), whether two values exclude each other (a swap is a contradiction) and an optional detail that
# can be added without changing the fact.
Template = Callable[[str, str, str, str], str]

RELATIONS: dict[str, dict[str, object]] = {
    "lives": {
        "values": [
            "Lisbon",
            "Oslo",
            "Toronto",
            "Nairobi",
            "Seoul",
            "Denver",
            "Madrid",
            "Dublin",
            "Kyoto",
            "Austin",
            "Porto",
            "Vienna",
            "Chicago",
            "Melbourne",
            "Cairo",
            "Lima",
        ],
        "templates": [
            lambda s, p, v, a: f"{s} {_verb('live', a)} in {v}.",
            lambda s, p, v, a: f"{s} {_verb('reside', a)} in {v}.",
            lambda s, p, v, a: f"{p.capitalize()} home is in {v}.",
            lambda s, p, v, a: f"{s} {_be(a)} based in {v}.",
            lambda s, p, v, a: f"{v} is where {_mid(s)} {_verb('live', a)}.",
        ],
        "negated": lambda s, p, v, a: f"{s} {_do(a)} not live in {v}.",
        "detail": lambda s, p, v, a: f"{s} {_verb('live', a)} in a small flat in {v}.",
        "exclusive": True,
    },
    "works": {
        "values": [
            "Globex",
            "Initech",
            "Acme Corp",
            "Umbrella Labs",
            "Hooli",
            "Stark Industries",
            "Wayne Enterprises",
            "Vandelay Imports",
            "Soylent",
            "Cyberdyne",
        ],
        "templates": [
            lambda s, p, v, a: f"{s} {_verb('work', a)} at {v}.",
            lambda s, p, v, a: f"{s} {_be(a)} employed by {v}.",
            lambda s, p, v, a: f"{p.capitalize()} employer is {v}.",
            lambda s, p, v, a: f"{s} {_verb('have', a)} a job at {v}.",
        ],
        "negated": lambda s, p, v, a: f"{s} {_do(a)} not work at {v}.",
        "detail": lambda s, p, v, a: f"{s} {_verb('work', a)} at {v} in the finance team.",
        "exclusive": True,
    },
    "job": {
        "values": [
            "nurse",
            "teacher",
            "pilot",
            "lawyer",
            "chef",
            "software engineer",
            "dentist",
            "architect",
            "plumber",
            "journalist",
            "accountant",
            "firefighter",
        ],
        "templates": [
            lambda s, p, v, a: f"{s} {_verb('work', a)} as a {v}.",
            lambda s, p, v, a: f"{s} {_be(a)} a {v} by profession.",
            lambda s, p, v, a: f"{p.capitalize()} job is {v}.",
            lambda s, p, v, a: f"{s} {_verb('earn', a)} a living as a {v}.",
        ],
        "negated": lambda s, p, v, a: f"{s} {_be(a)} not a {v}.",
        "detail": lambda s, p, v, a: f"{s} {_verb('work', a)} as a {v} at the local hospital.",
        "exclusive": True,
    },
    "drink": {
        "values": ["green tea", "black coffee", "sparkling water", "orange juice", "hot chocolate", "oat milk lattes"],
        "templates": [
            lambda s, p, v, a: f"{s} {_verb('prefer', a)} {v} in the morning.",
            lambda s, p, v, a: f"In the morning {_mid(s)} {_verb('prefer', a)} {v}.",
            lambda s, p, v, a: f"{p.capitalize()} preferred morning drink is {v}.",
            lambda s, p, v, a: f"{s} {_verb('like', a)} to start the day with {v}.",
        ],
        "negated": lambda s, p, v, a: f"{s} {_do(a)} not drink {v} in the morning.",
        "detail": lambda s, p, v, a: f"{s} {_verb('prefer', a)} {v} in the morning, without sugar.",
        "exclusive": True,
    },
    "favourite": {
        "values": ["Rust", "Go", "Haskell", "Kotlin", "TypeScript", "Ruby", "Elixir", "Swift", "Java", "Scala"],
        "templates": [
            lambda s, p, v, a: f"{p.capitalize()} favourite programming language is {v}.",
            lambda s, p, v, a: f"{v} is {p} favourite programming language.",
            lambda s, p, v, a: f"{s} {_verb('like', a)} {v} best of all programming languages.",
            lambda s, p, v, a: f"Of all programming languages, {_mid(s)} {_verb('love', a)} {v} the most.",
        ],
        "negated": lambda s, p, v, a: f"{s} {_do(a)} not like {v} at all.",
        "detail": lambda s, p, v, a: f"{p.capitalize()} favourite programming language for side projects is {v}.",
        "exclusive": True,
    },
    "pets": {
        "values": ["2", "3", "4", "5", "two", "three", "four", "six"],
        "templates": [
            lambda s, p, v, a: f"{s} {_verb('have', a)} {v} cats.",
            lambda s, p, v, a: f"{s} {_verb('own', a)} {v} cats.",
            lambda s, p, v, a: f"There are {v} cats in {p} home.",
            lambda s, p, v, a: f"{s} {_verb('look', a)} after {v} cats at home.",
        ],
        "negated": lambda s, p, v, a: f"{s} {_do(a)} not have any cats.",
        "detail": lambda s, p, v, a: f"{s} {_verb('have', a)} {v} cats and a goldfish.",
        "exclusive": True,
    },
    "born": {
        "values": ["1984", "1990", "1975", "2001", "1968", "1995", "1988", "1979"],
        "templates": [
            lambda s, p, v, a: f"{s} {'was' if a else 'was'} born in {v}.",
            lambda s, p, v, a: f"{p.capitalize()} year of birth is {v}.",
            lambda s, p, v, a: f"{s} {'was' if a else 'was'} born back in {v}.",
            lambda s, p, v, a: f"{v} is the year {_mid(s)} {'was' if a else 'was'} born.",
        ],
        "negated": None,
        "detail": lambda s, p, v, a: f"{s} {'was' if a else 'was'} born in {v} in a small town.",
        "exclusive": True,
    },
    "allergy": {
        "values": ["peanuts", "shellfish", "penicillin", "cats", "pollen", "gluten", "latex", "bee stings"],
        "templates": [
            lambda s, p, v, a: f"{s} {_be(a)} allergic to {v}.",
            lambda s, p, v, a: f"{s} {_verb('have', a)} an allergy to {v}.",
            lambda s, p, v, a: (
                f"{v.capitalize()} {'give' if v.endswith('s') else 'gives'} {_mid(s, me=True)} an allergic reaction."
            ),
        ],
        "negated": lambda s, p, v, a: f"{s} {_be(a)} not allergic to {v}.",
        "detail": lambda s, p, v, a: f"{s} {_be(a)} severely allergic to {v}.",
        "exclusive": False,
    },
}
EVENTS = [
    "standup",
    "book club",
    "yoga class",
    "piano lesson",
    "team retro",
    "dentist appointment",
    "football practice",
]
DAYS = ["Monday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
EVENT_TEMPLATES = [
    lambda e, d: f"The {e} is on {d}.",
    lambda e, d: f"The {e} happens every {d}.",
    lambda e, d: f"Every {d} there is the {e}.",
    lambda e, d: f"We have the {e} on {d}s.",
]
TIMES = ["9am", "10:30", "noon", "3pm", "4pm", "6:45pm", "8am"]

# A state and its opposite, said of one thing ("The oven is on" / "The oven is off").
OPPOSITES = [
    ("on", "off"),
    ("open", "closed"),
    ("wet", "dry"),
    ("full", "empty"),
    ("near", "far from"),
    ("early", "late"),
    ("hot", "cold"),
    ("clean", "dirty"),
    ("awake", "asleep"),
    ("inside", "outside"),
    ("light", "heavy"),
    ("cheap", "expensive"),
    ("quiet", "noisy"),
    ("happy", "sad"),
    ("allowed", "forbidden"),
    ("married", "single"),
]
THINGS = ["oven", "garage door", "heater", "back gate", "kitchen window", "shop on the corner", "laptop", "porch light"]
STATES = [
    ("The {x} is {w}.", ["on", "off"]),
    ("The {x} was left {w}.", ["on", "off"]),
    ("The {x} is {w} today.", ["open", "closed"]),
    ("The {x} is {w}.", ["full", "empty"]),
    ("The {x} is {w} now.", ["clean", "dirty"]),
    ("The {x} is {w}.", ["hot", "cold"]),
]
ROLE_VERBS = [
    "follows",
    "manages",
    "is older than",
    "owes money to",
    "beat",
    "is teaching",
    "called",
    "works for",
    "is taller than",
    "emailed",
    "hired",
    "reports to",
]
OPPOSITE_VERBS = [
    ("likes", "dislikes"),
    ("loves", "hates"),
    ("passed", "failed"),
    ("won", "lost"),
    ("accepted", "rejected"),
    ("arrived early", "arrived late"),
    ("agreed", "refused"),
]
OPPOSITE_OBJECTS = ["the offer", "the exam", "the match", "the proposal", "the interview", "the new policy"]


def _relation_pairs(rng: random.Random) -> Iterator[tuple[str, str, str, str]]:
    names = list(RELATIONS)
    for name, rel in RELATIONS.items():
        values: list[str] = rel["values"]  # type: ignore[assignment]
        templates: list[Template] = rel["templates"]  # type: ignore[assignment]
        negated: Template | None = rel["negated"]  # type: ignore[assignment]
        detail: Template = rel["detail"]  # type: ignore[assignment]
        for subject in SUBJECTS:
            s, p, a = subject
            for v in rng.sample(values, min(4, len(values))):
                t1, t2 = rng.sample(templates, 2)
                yield t1(s, p, v, a), t2(s, p, v, a), "same", f"{name}:reworded"
                yield rng.choice(templates)(s, p, v, a), detail(s, p, v, a), "same", f"{name}:detail"
                other = rng.choice([x for x in values if x != v])
                label = "contradiction" if rel["exclusive"] else "distinct"
                kind = "value-swap" if name != "pets" and name != "born" else "number-changed"
                yield t1(s, p, v, a), rng.choice(templates)(s, p, other, a), label, f"{name}:{kind}"
                if negated is not None:
                    yield rng.choice(templates)(s, p, v, a), negated(s, p, v, a), "contradiction", f"{name}:negation"
                # another subject saying the same: another fact
                o = rng.choice([x for x in SUBJECTS if x[0].lower() not in (s.lower(),) and x[1] != p])
                yield t1(s, p, v, a), t2(o[0], o[1], v, o[2]), "distinct", f"{name}:other-subject"
                # another relation of the same subject: another fact
                other_rel = RELATIONS[rng.choice([n for n in names if n != name])]
                ov = rng.choice(other_rel["values"])  # type: ignore[arg-type]
                yield (
                    t1(s, p, v, a),
                    rng.choice(other_rel["templates"])(s, p, ov, a),
                    "distinct",
                    f"{name}:other-relation",
                )  # type: ignore[operator]


def _event_pairs(rng: random.Random) -> Iterator[tuple[str, str, str, str]]:
    for e in EVENTS:
        for d in DAYS:
            t1, t2 = rng.sample(EVENT_TEMPLATES, 2)
            yield t1(e, d), t2(e, d), "same", "event:reworded"
            other = rng.choice([x for x in DAYS if x != d])
            yield t1(e, d), rng.choice(EVENT_TEMPLATES)(e, other), "contradiction", "event:date-changed"
            time = rng.choice(TIMES)
            yield t1(e, d), f"The {e} is on {d} at {time}.", "same", "event:detail"
            yield (
                f"The {e} starts at {time}.",
                f"The {e} starts at {rng.choice([x for x in TIMES if x != time])}.",
                "contradiction",
                "event:time-changed",
            )
            yield t1(e, d), t2(rng.choice([x for x in EVENTS if x != e]), d), "distinct", "event:other-event"
            yield f"The {e} is on {d}.", f"The {e} is not on {d}.", "contradiction", "event:negation"


def _state_pairs(rng: random.Random) -> Iterator[tuple[str, str, str, str]]:
    for template, (w1, w2) in STATES:
        for x in THINGS:
            yield template.format(x=x, w=w1), template.format(x=x, w=w2), "contradiction", "state:opposite"
            yield (
                template.format(x=x, w=w1),
                template.format(x=rng.choice([y for y in THINGS if y != x]), w=w1),
                "distinct",
                "state:other-thing",
            )
    for w1, w2 in OPPOSITES:
        for person in rng.sample(PEOPLE, 3):
            yield f"{person} is {w1}.", f"{person} is {w2}.", "contradiction", "state:opposite"
            yield (
                f"{person} is {w1}.",
                f"{rng.choice([q for q in PEOPLE if q != person])} is {w1}.",
                "distinct",
                "state:other-person",
            )
    for v1, v2 in OPPOSITE_VERBS:
        for obj in OPPOSITE_OBJECTS:
            person = rng.choice(PEOPLE)
            yield f"{person} {v1} {obj}.", f"{person} {v2} {obj}.", "contradiction", "verb:opposite"


def _role_pairs(rng: random.Random) -> Iterator[tuple[str, str, str, str]]:
    for verb in ROLE_VERBS:
        for _ in range(6):
            x, y = rng.sample(PEOPLE, 2)
            yield f"{x} {verb} {y}.", f"{y} {verb} {x}.", "contradiction", "role-reversal"
            z = rng.choice([q for q in PEOPLE if q not in (x, y)])
            yield f"{x} {verb} {y}.", f"{x} {verb} {z}.", "distinct", "role:other-object"
        x, y = rng.sample(PEOPLE, 2)
        passive = {
            "follows": "is followed by",
            "manages": "is managed by",
            "beat": "was beaten by",
            "hired": "was hired by",
            "called": "was called by",
            "emailed": "was emailed by",
        }.get(verb)
        if passive:
            yield f"{x} {verb} {y}.", f"{y} {passive} {x}.", "same", "role:passive"


def generate(seed: int) -> list[tuple[str, str, str, str]]:
    """``(a, b, label, kind)`` for every synthetic pair, in a seeded order; some turns get a speaker prefix."""
    rng = random.Random(seed)
    out = [*_relation_pairs(rng), *_event_pairs(rng), *_state_pairs(rng), *_role_pairs(rng)]
    prefixed = []
    for a, b, label, kind in out:
        if rng.random() < 0.15 and not a.startswith(("I ", "My ")):  # dialogue style: "Dana: ..."
            speaker = rng.choice(PEOPLE)
            a, b = f"{speaker}: {a}", f"{speaker}: {b}"
        prefixed.append((a, b, label, kind))
    rng.shuffle(prefixed)
    return prefixed
