"""Does the store converge? A simulated year of an agent's memory stream, the pipeline run as the schedules would.

    python bench/bench_convergence.py                       # 2 agents, 365 days, pipeline every 3 days
    python bench/bench_convergence.py --agents 1 --every 7  # quick (what make bench runs)

Stream (seeded, written for this project; nothing is downloaded): each agent is the memory of one person.
Every day it writes, through the checked import (the write path's dedup, merge judge and contradiction rules):

- **facts**: 16 facts about the person (a pet's name, a city, an employer, a drink, a sibling, a birthday, a
  number ...), introduced over the first months, each stated in one of three styles (first person, third
  person ``User ...``, a dialogue turn ``Dana: ...``);
- **rewordings**: a known fact stated again in another of its wordings (about one a day);
- **value changes**: a fact whose value changes (a move, a new employer, another drink; about one in 12
  days), stated as a change; the question then asks for the new value;
- **chit-chat**: 8 lines a day of greetings, thanks, acknowledgements, laughter, emoji and sign-offs in the three
  styles, never recalled;
- **repeated episodes**: routine lines (a run, a breakfast, a commute) that recur, some word for word.

The full pipeline (:func:`engram_pipeline.lifecycle.pipeline.pipeline_sweep`) runs every ``--every`` days at that
day's end, under each retention policy (``signal``, the default, ``safe`` and ``seed``), each on its own store
fed the same stream. Every 30 days it prints, per policy: rows in default recall, rows in total, distinct facts
(the facts introduced so far, plus the kinds of routine episode), rows in recall per distinct fact, chit-chat
still in recall, and **evidence recall**: for every fact introduced so far, a question; a hit is a row among the
first 10 ids recall returns (a derived hit's evidence counts) whose text holds the fact's *current* value.
The judge deciding write-time collapse and merges is printed (``ENGRAM_JUDGE=auto``: the embedder's calibrated
judge when its weights ship).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from results import Results  # noqa: E402

from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.judge import get_judge  # noqa: E402
from engram_pipeline.lifecycle.pipeline import pipeline_sweep  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402
from engram_pipeline.visibility import is_visible  # noqa: E402
from tests.corpora.dialogues import ranked_ids  # noqa: E402

START = datetime(2026, 1, 1, 8, tzinfo=UTC)
PEOPLE = ["Dana", "Ravi", "Lena", "Omar"]

# key -> (question about {who}, [wordings: first person, third person, dialogue], values, changes?)
FACTS: dict[str, tuple[str, list[str], list[str], bool]] = {
    "pet": (
        "What is the name of {who}'s dog?",
        ["My dog is called {v}.", "User's dog is named {v}.", "{who}: I walked {v}, my dog, by the river."],
        ["Biscuit", "Pepper", "Noodle", "Ziggy"],
        False,
    ),
    "city": (
        "Which city does {who} live in?",
        ["I live in {v}.", "User lives in {v}.", "{who}: I moved to {v} last year."],
        ["Lisbon", "Tampere", "Denver", "Krakow", "Osaka"],
        True,
    ),
    "employer": (
        "Where does {who} work?",
        ["I work at {v}.", "User works for {v}.", "{who}: my job at {v} keeps me busy."],
        ["Acme", "Globex", "Initech", "Umbrella", "Hooli"],
        True,
    ),
    "drink": (
        "What does {who} drink in the morning?",
        ["I drink {v} every morning.", "User has {v} in the mornings.", "{who}: {v} is my morning drink."],
        ["espresso", "matcha", "rooibos", "cocoa"],
        True,
    ),
    "sibling": (
        "What is the name of {who}'s sister?",
        ["My sister is {v}.", "User's sister is called {v}.", "{who}: my sister {v} visited us."],
        ["Clara", "Mina", "Ana", "Yusra"],
        False,
    ),
    "birthday": (
        "When is {who}'s birthday?",
        ["My birthday is on {v}.", "User's birthday is {v}.", "{who}: I turn a year older on {v}."],
        ["March 3", "July 19", "October 2", "December 11"],
        False,
    ),
    "allergy": (
        "What is {who} allergic to?",
        ["I'm allergic to {v}.", "User is allergic to {v}.", "{who}: I can't have {v}, I'm allergic."],
        ["peanuts", "penicillin", "shellfish", "sesame"],
        False,
    ),
    "car": (
        "What car does {who} drive?",
        ["I drive a {v}.", "User drives a {v}.", "{who}: my {v} needs new tyres."],
        ["Volvo", "Civic", "Corolla", "Golf"],
        True,
    ),
    "editor": (
        "Which editor does {who} use?",
        ["I use {v} for coding.", "User codes in {v}.", "{who}: I do all my coding in {v}."],
        ["vim", "emacs", "vscode", "helix"],
        True,
    ),
    "hobby": (
        "What hobby does {who} have?",
        ["I do {v} on weekends.", "User's hobby is {v}.", "{who}: {v} is what I do every weekend."],
        ["pottery", "bouldering", "birdwatching", "chess"],
        True,
    ),
    "rent": (
        "How much rent does {who} pay?",
        ["My rent is {v} a month.", "User pays {v} in rent each month.", "{who}: rent is {v} a month here."],
        ["1,200 euros", "950 euros", "1,450 euros", "800 euros"],
        True,
    ),
    "partner": (
        "What is the name of {who}'s partner?",
        ["My partner is {v}.", "User's partner is named {v}.", "{who}: {v} and I have been together for years."],
        ["Jordan", "Priya", "Tomas", "Ines"],
        False,
    ),
    "book": (
        "Which book is {who} reading?",
        ["I'm reading {v}.", "User is reading {v}.", "{who}: I can't put {v} down."],
        ["Piranesi", "Circe", "Middlemarch", "Solaris"],
        True,
    ),
    "gym": (
        "Which day does {who} go to the gym?",
        ["I go to the gym on {v}.", "User's gym day is {v}.", "{who}: {v} is my gym day."],
        ["Monday", "Wednesday", "Thursday", "Saturday"],
        True,
    ),
    "team": (
        "Which football team does {who} support?",
        ["I support {v}.", "User is a {v} fan.", "{who}: I never miss a {v} match."],
        ["Arsenal", "Benfica", "Ajax", "Celtic"],
        False,
    ),
    "kids": (
        "How many children does {who} have?",
        ["I have {v} kids.", "User has {v} children.", "{who}: our {v} kids keep us busy."],
        ["two", "three", "four"],
        False,
    ),
}
CHANGE = ["I switched to {v}.", "User changed to {v}.", "{who}: it's {v} for me from now on."]
ROUTINE = [
    "{who}: went for my usual run by the canal.",
    "User had porridge for breakfast again.",
    "I took the 8:10 train to the office.",
    "{who}: walked the dog around the park before work.",
    "User called their mum after dinner.",
]
GREET = ["hi", "hello", "hey", "good morning", "morning", "good night", "evening"]
ACK = ["ok", "okay", "sure", "got it", "sounds good", "cool", "nice", "yep", "right", "true", "fair enough"]
LAUGH = ["haha", "lol", "hahaha", "lmao", "hehe"]
EMOJI = ["👍", "😂", "🙏", "❤️", "😊", "🙌"]
THANKS = ["thanks", "thank you", "thanks so much", "cheers", "much appreciated", "thanks again"]
BYE = ["bye", "talk soon", "see you", "take care", "later", "good night"]
CHAT_FIRST = ["{g}!", "{t}!", "{l}", "{a}", "{e}", "{l} {a}", "{t}, {b}!", "{a}, {t}", "{g}, how are you?"]
CHAT_THIRD = ['User said "{a}".', "User said {g}.", "The user said {t}.", "User laughed.", 'User replied "{l}".']
CHAT_DIALOGUE = ["{who}: {g}!", "{who}: {t}!!", "{who}: {l}", "{who}: {a}", "{who}: {e}{e}", "{who}: {b}!"]


@dataclass
class Person:
    name: str
    rng: random.Random
    values: dict[str, str] = field(default_factory=dict)  # the facts introduced so far, at their current value
    routines: set[int] = field(default_factory=set)
    start: int = 0  # the day its first fact is stated

    def wording(self, key: str, value: str) -> str:
        return self.rng.choice(FACTS[key][1]).format(v=value, who=self.name)

    def day(self, d: int) -> list[tuple[str, str]]:
        """(content, kind) lines of day ``d``."""
        rng, out = self.rng, []
        unseen = [k for k in FACTS if k not in self.values]
        if unseen and rng.random() < 0.25:  # about 16 facts over the first two months
            key = rng.choice(unseen)
            self.values[key] = rng.choice(FACTS[key][2])
            out.append((self.wording(key, self.values[key]), "semantic"))
        if self.values and rng.random() < 0.8:
            key = rng.choice(sorted(self.values))
            out.append((self.wording(key, self.values[key]), "semantic"))
        changeable = [k for k in sorted(self.values) if FACTS[k][3]]
        if changeable and rng.random() < 1 / 12:
            key = rng.choice(changeable)
            self.values[key] = rng.choice([v for v in FACTS[key][2] if v != self.values[key]])
            out.append((rng.choice(CHANGE).format(v=self.values[key], who=self.name), "semantic"))
        for _ in range(rng.choice([1, 1, 2])):
            r = rng.randrange(len(ROUTINE))
            self.routines.add(r)
            out.append((ROUTINE[r].format(who=self.name), "episodic"))
        for _ in range(8):
            style = rng.choice([CHAT_FIRST, CHAT_THIRD, CHAT_DIALOGUE])
            slots = {"g": GREET, "a": ACK, "l": LAUGH, "e": EMOJI, "t": THANKS, "b": BYE}
            text = rng.choice(style).format(who=self.name, **{k: rng.choice(v) for k, v in slots.items()})
            CHAT.add(text)
            out.append((text, "episodic"))
        return out


def stream(agents: int, days: int, seed: int) -> tuple[list[list[dict[str, Any]]], list[list[dict[str, str]]]]:
    """Per day: the import lines of every agent, and a snapshot of each agent's facts (key -> current value)."""
    people = [Person(PEOPLE[a], random.Random(seed * 100 + a)) for a in range(agents)]
    lines: list[list[dict[str, Any]]] = []
    truth: list[list[dict[str, str]]] = []
    for d in range(days):
        today = []
        for p in people:
            for i, (content, kind) in enumerate(p.day(d)):
                at = START + timedelta(days=d, minutes=7 * i)
                today.append(
                    {"agent_id": p.name.lower(), "content": content, "kind": kind, "created_at": at.isoformat()}
                )
        lines.append(today)
        truth.append([dict(p.values) | {f"routine{r}": "" for r in p.routines} for p in people])
    return lines, truth


CHAT: set[str] = set()  # every chit-chat line the stream wrote


def is_chat(content: str) -> bool:
    return content in CHAT


def measure(store: MemoryStore, agents: Sequence[str], facts: list[dict[str, str]], now: datetime) -> dict[str, Any]:
    rows = [r for a in agents for r in store.list_memories(a)]
    visible = [r for r in rows if is_visible(r)]
    asked = found = 0
    for a, known in zip(agents, facts, strict=True):
        who = a.capitalize()
        for key, value in known.items():
            if key.startswith("routine"):
                continue
            asked += 1
            hits = store.recall(a, FACTS[key][0].format(who=who), k=10, now=now, track_access=False)
            ids = ranked_ids(hits)[:10]
            content = {h.memory["id"]: h.memory["content"] for h in hits}
            content |= {e["id"]: e["content"] for h in hits for e in h.evidence}
            found += any(value.lower() in content[i].lower() for i in ids)
    distinct = sum(len(k) for k in facts)
    return {
        "visible": len(visible),
        "total": len(rows),
        "distinct": distinct,
        "per_fact": len(visible) / distinct if distinct else 0.0,
        "chat": sum(is_chat(r["content"]) for r in visible),
        "chat_total": sum(is_chat(r["content"]) for r in rows),
        "recall10": found / asked if asked else 0.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--every", type=int, default=3, help="run the pipeline every N days")
    ap.add_argument("--report-every", type=int, default=30)
    ap.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    ap.add_argument("--policies", default="signal,safe,seed")
    ap.add_argument("--seed", type=int, default=33)
    args = ap.parse_args()
    recorded = Results("convergence", args)
    lines, truth = stream(args.agents, args.days, args.seed)
    agents = sorted({line["agent_id"] for day in lines for line in day})
    policies = args.policies.split(",")
    root = Path(tempfile.mkdtemp(prefix="bench-convergence-"))
    stores = {
        p: MemoryStore.open(
            str(root / p),
            settings=Settings.from_env({"ENGRAM_EMBEDDER": args.embedder, "ENGRAM_RETENTION_POLICY": p}),
        )
        for p in policies
    }
    judge = get_judge(stores[policies[0]])
    print(
        f"{args.agents} agent(s), {args.days} days, {sum(map(len, lines))} lines written, pipeline every "
        f"{args.every} days; embedder {args.embedder}, judge {judge.name} (ENGRAM_JUDGE=auto)",
        flush=True,
    )
    results: dict[str, list[tuple[int, dict[str, Any]]]] = {p: [] for p in policies}
    started = time.perf_counter()
    try:
        for d, today in enumerate(lines):
            end = START + timedelta(days=d + 1)
            for p, store in stores.items():
                report = import_jsonl(store, today)
                assert not report.errors, report.errors
                if (d + 1) % args.every == 0:
                    pipeline_sweep(store, agents, now=end)
                if (d + 1) % args.report_every == 0 or d + 1 == args.days:
                    results[p].append((d + 1, measure(store, agents, truth[d], end)))
            if (d + 1) % args.report_every == 0:
                print(f"  day {d + 1}: {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        "| policy | day | rows in recall / total | distinct facts | rows in recall per fact "
        "| chit-chat rows in recall / stored | evidence recall@10 |"
    )
    print("|---|---|---|---|---|---|---|")
    for p in policies:
        for day, m in results[p]:
            print(
                f"| {p} | {day} | {m['visible']:,} / {m['total']:,} | {m['distinct']} | {m['per_fact']:.1f} | "
                f"{m['chat']:,} / {m['chat_total']:,} | {m['recall10']:.3f} |"
            )
            recorded.add("policies", policy=p, day=day, **m)
    took = time.perf_counter() - started
    print(f"\n{took:.0f} s")
    recorded.add("run", lines=sum(map(len, lines)), judge=judge.name, seconds=took)
    recorded.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
