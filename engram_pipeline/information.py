"""How much a memory says: an information score in [0, 1] read from its content alone.

A row that makes no claim about anyone or anything (a greeting, thanks, an acknowledgement, a backchannel, a
filler, a reaction, laughter, a one-word reply, an emoji, a sign-off, or a report of one: "User said thanks")
scores near 0; a row that states a fact, a preference, a plan, a relation, a number or a date scores near 1,
however plainly it is worded, in the first person, the third person or as a dialogue turn (``Dana: ...``).

The score is a logistic regression (numpy only; no embedder, no torch) over cheap lexical features of the text
with its speaker and context prefixes removed:

- ``w:<word>``: each distinct word of a vocabulary learned in training (digits, number words, times and
  dates are folded into ``w:<num>`` and ``w:<date>``);
- cues: ``claim`` (the claim patterns of :mod:`engram_pipeline.claims` read one), ``number``, ``date``,
  ``name`` (a capitalised word inside the sentence), ``content`` (log of 1 + the words that are neither phatic
  nor function words), ``phatic`` (the share of phatic words: hi, thanks, ok, haha, bye, ..., and the words
  that record chit-chat: greeting, joke, message), ``statement`` (a subject, then such a content word),
  ``one_word``,
  ``question``, ``no_letters`` (emoji, punctuation).

The weights are fitted by ``bench/train_information.py`` on a labelled set written for this project
(``bench/data/information/labelled.jsonl``: facts and chit-chat in the three styles, with a fixed train/test
split) and shipped in ``engram_pipeline/data/information.json`` with their held-out figures. What counts as
noise is a threshold on the score (``ENGRAM_NOISE_THRESHOLD``, :mod:`engram_pipeline.settings`).

:func:`information_of` scores texts in one call; :func:`explain` names the features that weighed most (what
``importance_factors`` records as ``information_cues``).

>>> round(information_of(["Dana: I moved to Leeds last year."])[0], 2) > 0.9
True
>>> round(information_of(["Sam: haha yes"])[0], 2) < 0.1
True
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from engram_pipeline.claims import parse_claims
from engram_pipeline.lexicon import MONTH_ABBREVIATIONS, MONTHS, NUMBER_WORDS, WEEKDAYS, words
from engram_pipeline.utterances import drop_speaker, strip_context

MODEL_FILE = "information.json"
CUES = ("claim", "statement", "number", "date", "name", "content", "phatic", "one_word", "question", "no_letters")

# Words that carry no claim on their own: greetings, thanks, acknowledgements, backchannels, fillers,
# reactions, laughter, sign-offs. A cue (their share of a text), not a verdict: "thanks, I moved to Oslo" has
# a claim too.
PHATIC = words(
    "hi hello hey heya yo hiya morning evening night goodnight gm bye goodbye cya ciao cheers later soon "
    "thanks thank thx ty appreciate appreciated welcome np worries problem sorry oops apologies "
    "ok okay k kk alright yes yeah yep yup yea sure no nope nah right true exactly agreed indeed totally "
    "absolutely definitely fair enough cool nice great awesome perfect amazing lovely wonderful fantastic "
    "wow omg oh ah aw aww ugh meh hmm hm um uh er huh sigh whoa yay congrats congratulations luck "
    "haha hahaha hehe lol lmao rofl xd same too care fun funny hilarious interesting good well so anyway "
    "mean know see guess think got it sounds plan chat talk said says replied thanked laughed greeted waved "
    "sighed smiled sent responded reacted wished emoji gif here back glad happy much"
)
# Words agents use to record chit-chat in the third person ("User exchanged greetings", "made a joke").
META = words(
    "greeting greetings joke jokes message messages acknowledgement acknowledgment acknowledged conversation "
    "chat smiley heart thumbs reply checked exchanged polite politely small"
)
FUNCTION_WORDS = words(
    "i me my mine we us our you your he him his she her they them their it its the a an and or but to of in on "
    "at for with by from as is are was were be been am do does did this that these those there here what how "
    "who which when just very really so too also then than not all some any"
)
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+(?:[.,:]\d+)*(?:am|pm|st|nd|rd|th|k)?")
_TIME = re.compile(r"\b\d{1,2}(?::\d{2})?\s*(?:am|pm)\b|\b\d{1,2}:\d{2}\b", re.IGNORECASE)
# A declarative about someone: a subject, then a word that is neither phatic nor a function word.
_SUBJECT = re.compile(
    r"^(?:the\s+)?(?:user|i|i'm|i've|i'd|we|we're|we've|my|our|his|her|their|he|she|they|[A-Z][a-z]+)(?:'s)?\s+",
    re.IGNORECASE,
)
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|[\"\u201c(]\s*)$")
_DATES = MONTHS | MONTH_ABBREVIATIONS | WEEKDAYS | words("today tomorrow yesterday weekend week month year")


@dataclass(frozen=True)
class InformationModel:
    """The fitted weights: ``weights[name]`` for each feature name, ``bias``, the model's ``version``, and each
    feature's mean over the training texts (``means``: what :func:`explain` measures a text against)."""

    version: str
    bias: float
    weights: dict[str, float]
    means: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, text: str | None = None) -> InformationModel:
        data = json.loads(text if text is not None else _packaged())
        weights = {k: float(v) for k, v in data["weights"].items()}
        return cls(str(data["version"]), float(data["bias"]), weights, {k: float(v) for k, v in data["means"].items()})

    lacking: tuple[tuple[str, float], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # what lacking each feature adds to the logit (-weight * mean), largest first: explain() reads it
        out = [(name, -w * self.means.get(name, 0.0)) for name, w in self.weights.items()]
        object.__setattr__(self, "lacking", tuple(sorted(out, key=lambda p: (-abs(p[1]), p[0]))))

    def logit(self, feats: dict[str, float]) -> float:
        return self.bias + sum(self.weights.get(name, 0.0) * x for name, x in feats.items())

    def score(self, text: str) -> float:
        return 1.0 / (1.0 + math.exp(-self.logit(features(text))))


def _packaged() -> str:
    return resources.files("engram_pipeline").joinpath("data", MODEL_FILE).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def model() -> InformationModel:
    """The shipped model (read once)."""
    return InformationModel.load()


def body(text: str) -> str:
    """What a text says, without its context prefix (``Session 3:``, a date) and speaker (``Dana:``)."""
    return drop_speaker(strip_context(text)).strip()


def _word(token: str) -> str:
    low = token.lower()
    if low[0].isdigit() or low in NUMBER_WORDS:
        return "<num>"
    if low in MONTHS or low in MONTH_ABBREVIATIONS or low in WEEKDAYS:
        return "<date>"
    return low


@functools.lru_cache(maxsize=65_536)  # chit-chat repeats word for word ("ok", "thanks!")
def features(text: str) -> dict[str, float]:
    """The named features of ``text`` (see the module docstring); absent features are 0."""
    said = body(text)
    found = list(_TOKEN.finditer(said))
    tokens = [m.group() for m in found]
    lows = [t.lower() for t in tokens]
    out: dict[str, float] = {f"w:{w}": 1.0 for w in {_word(t) for t in tokens}}
    named = any(
        t[0].isupper()
        and t not in ("I", "I'm", "I've", "I'd", "I'll")
        and not _SENTENCE_START.search(said[: m.start()])
        for t, m in zip(tokens, found, strict=True)
    )
    numeric = any(t[0].isdigit() or t in NUMBER_WORDS for t in lows) or bool(_TIME.search(said))
    content = [t for t in lows if t not in PHATIC and t not in META and t not in FUNCTION_WORDS]
    subject = _SUBJECT.match(said)
    if subject and subject.group().split()[-1].lower().removesuffix("'s") in PHATIC:  # "Thanks so much"
        subject = None
    rest = {t.lower() for t in _TOKEN.findall(said[subject.end() :])} if subject else set()
    cues = {
        "claim": bool(said) and bool(parse_claims(said)),
        "statement": bool(rest - PHATIC - META - FUNCTION_WORDS),
        "number": numeric,
        "date": any(t in _DATES for t in lows),
        "name": named,
        "content": math.log1p(len(content)),
        "phatic": sum(t in PHATIC or t in META for t in lows) / len(lows) if lows else 1.0,
        "one_word": len(tokens) <= 1,
        "question": said.rstrip().endswith("?"),
        "no_letters": not any(c.isalpha() for c in said),
    }
    out.update({f"cue:{k}": float(v) for k, v in cues.items() if v})
    return out


def information_of(texts: Iterable[str], *, fitted: InformationModel | None = None) -> list[float]:
    """The information score of each text, in order."""
    m = fitted or model()
    return [m.score(t) for t in texts]


def explain(text: str, *, top: int = 3, fitted: InformationModel | None = None) -> list[str]:
    """The ``top`` features that moved ``text``'s score most away from an average training text, as
    ``"name+1.23"`` (towards a fact) or ``"name-0.87"`` (towards noise); a feature the text lacks is named
    ``"no name"`` (``weight * (value - mean)``, the logit's share of each feature).

    >>> explain("Thanks so much!")
    ['no cue:content-6.33', 'cue:phatic-2.51', 'no cue:statement-0.95']
    """
    m = fitted or model()
    have = features(text)
    parts = [(name, m.weights[name] * (x - m.means.get(name, 0.0))) for name, x in have.items() if name in m.weights]
    parts += [(f"no {name}", value) for name, value in m.lacking[: top + len(have)] if name not in have]
    parts = [p for p in parts if abs(p[1]) >= 0.005]
    parts.sort(key=lambda p: (-abs(p[1]), p[0]))
    return [f"{name}{value:+.2f}" for name, value in parts[:top]]


def information_factors(texts: Sequence[str]) -> list[dict[str, object]]:
    """What the write path and the backfill record in ``importance_factors`` for each text: ``information``
    (the score, 4 digits), ``information_cues`` (:func:`explain`) and ``information_model`` (the version, so a
    new model's backfill knows what to re-score)."""
    m = model()
    return [
        {"information": round(m.score(t), 4), "information_cues": explain(t, fitted=m), "information_model": m.version}
        for t in texts
    ]


def design_matrix(texts: Sequence[str], names: Sequence[str]) -> np.ndarray:
    """``texts`` as rows over the feature ``names`` (for training and evaluation)."""
    index = {n: j for j, n in enumerate(names)}
    x = np.zeros((len(texts), len(names)))
    for i, t in enumerate(texts):
        for name, value in features(t).items():
            j = index.get(name)
            if j is not None:
                x[i, j] = value
    return x


def figures_table() -> str:
    """The shipped model's held-out figures as a markdown table (docs/retention.md carries it)."""
    data = json.loads(_packaged())
    lines = [
        f"Model `{data['version']}`, fitted on {data['trained_on']}; "
        f"at `ENGRAM_NOISE_THRESHOLD` = {data['threshold']}:",
        "",
        "| split | style | facts | noise | noise precision | noise recall | facts kept |",
        "|---|---|---|---|---|---|---|",
    ]
    for split in ("test", "train"):
        for style, f in data["figures"][split].items():
            lines.append(
                f"| {split} | {style} | {f['facts']} | {f['noise']} | {f['noise_precision']:.3f} | "
                f"{f['noise_recall']:.3f} | {f['facts_kept']:.3f} |"
            )
    return "\n".join(lines) + "\n"
