"""The pair model's data: public human-labelled pairs (``data/``, listed in ``MANIFEST.json``) and our own hard
cases (:mod:`synthetic`), each mapped to the model's three classes and split into train, validation and test.

| source | train | validation (thresholds) | test (reported only) |
|---|---|---|---|
| MSR paraphrase corpus | ``msr-para-train.tsv`` | ``msr-para-val.tsv`` | ``msr-para-test.tsv`` |
| SICK 2014 (entailment) | ``SICK_train.txt`` | ``SICK_trial.txt`` | ``SICK_test_annotated.txt`` |
| SemEval STS | the 2014-2015 files | - | the 2016 files |
| STS sentences negated or renumbered | from the 2014-2015 files | - | from the 2016 files |
| our templates (:mod:`synthetic`) | seed 0, 90% | seed 0, 10% | seed 1 |

Classes: ``duplicate`` (MSR paraphrase; SICK entailment with relatedness >= 4; STS >= 4.4), ``contradiction``
(SICK contradiction; a negated or renumbered STS sentence), ``distinct`` (MSR non-paraphrase; SICK neutral;
STS < 3.0). SICK entailment below relatedness 4 and STS 3.0-4.4 are left out of training: a sentence that
merely implies the other, or says "roughly" the same, is neither a merge we want taught nor a clear "distinct".
"""

from __future__ import annotations

import csv
import random
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = HERE / "data"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(HERE))

import synthetic  # noqa: E402
from calibrate_thresholds import CALIBRATION_FILES, HELD_OUT_FILES, STS, negate, renumber  # noqa: E402

CLASSES = ("duplicate", "contradiction", "distinct")
STS_SAME, STS_DISTINCT = 4.4, 3.0
SICK_SAME = 4.0
PERTURBED_TRAIN = 2000  # negated / renumbered STS sentences drawn for training


@dataclass(frozen=True)
class Example:
    a: str
    b: str
    label: int  # index into CLASSES
    source: str  # "msr", "sick", "sts", "perturbed", "synthetic:<kind>"
    score: float | None = None  # the STS score or SICK relatedness, where the source gives one


def msr(name: str) -> list[Example]:
    with open(DATA / name, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    label = {"1": 0, "0": 2}
    return [Example(r[3], r[4], label[r[0]], "msr") for r in rows if len(r) == 5]


def sick(name: str, *, train: bool) -> list[Example]:
    out = []
    with open(DATA / name, encoding="utf-8", newline="") as f:
        for r in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]:
            if len(r) < 5:
                continue
            a, b, rel, judgment = r[1], r[2], float(r[3]), r[4].strip()
            if judgment == "ENTAILMENT":
                if rel < SICK_SAME:
                    if train:
                        continue
                    label = 2  # reported as "not the same fact": it only implies the other
                else:
                    label = 0
            else:
                label = 1 if judgment == "CONTRADICTION" else 2
            out.append(Example(a, b, label, "sick", rel))
    return out


def _sts(files: tuple[str, ...], *, train: bool) -> list[Example]:
    out = []
    for name in files:
        with open(STS / name, encoding="utf-8", newline="") as f:
            for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                if len(r) < 3 or not r[0].strip():
                    continue
                score = float(r[0])
                if score >= STS_SAME:
                    label = 0
                elif score < STS_DISTINCT or not train:
                    label = 2
                else:
                    continue
                out.append(Example(r[1], r[2], label, "sts", score))
    return out


def _perturbed(sentences: list[str], rng: random.Random, limit: int | None) -> list[Example]:
    """A sentence beside its negation or with a number changed (``bench/calibrate_thresholds.py``'s rules)."""
    out = []
    for s in sorted(set(sentences)):
        for kind, changed in (("negation", negate(s)), ("number", renumber(s))):
            if changed is not None and changed != s:
                out.append(Example(s, changed, 1, f"perturbed:{kind}"))
    rng.shuffle(out)
    return out if limit is None else out[:limit]


def _synthetic(seed: int) -> list[Example]:
    return [
        Example(a, b, CLASSES.index("duplicate" if lab == "same" else lab), f"synthetic:{kind}")
        for a, b, lab, kind in synthetic.generate(seed)
    ]


def splits(seed: int = 0) -> dict[str, list[Example]]:
    """``train``, ``validation`` and ``test`` examples (the test split is only ever scored)."""
    rng = random.Random(seed)
    sts_train = _sts(CALIBRATION_FILES, train=True)
    sts_sentences = [s for e in _sts(CALIBRATION_FILES, train=False) for s in (e.a, e.b)]
    msr_train = msr("msr-para-train.tsv")
    syn = _synthetic(seed)
    cut = len(syn) // 10
    train = (
        msr_train
        + sick("SICK_train.txt", train=True)
        + sts_train
        + _perturbed(sts_sentences + [s for e in msr_train for s in (e.a, e.b)], rng, PERTURBED_TRAIN)
        + syn[cut:]
    )
    validation = msr("msr-para-val.tsv") + sick("SICK_trial.txt", train=False) + syn[:cut]
    held = _sts(HELD_OUT_FILES, train=False)
    test = (
        msr("msr-para-test.tsv")
        + sick("SICK_test_annotated.txt", train=False)
        + held
        + _perturbed([s for e in held for s in (e.a, e.b)], random.Random(seed + 1), None)
        + _synthetic(seed + 1)
    )
    rng.shuffle(train)
    return {"train": train, "validation": validation, "test": test}


if __name__ == "__main__":
    from collections import Counter

    for name, examples in splits().items():
        by = Counter((e.source.split(":")[0], CLASSES[e.label]) for e in examples)
        print(name, len(examples), dict(sorted(by.items())))
