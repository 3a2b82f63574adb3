"""Fit the information score (:mod:`engram_pipeline.information`) and report it on the held-out split.

    python bench/train_information.py [--write]

Data: ``bench/data/information/labelled.jsonl``, written for this project: facts and chit-chat, each in three
styles (first person, third person, dialogue turns with a speaker prefix); every line carries its ``split``
(``train`` / ``test``, fixed by a hash of the text, so it never moves). Only ``train`` is fitted on.

1. **Features**: :func:`engram_pipeline.information.features`; the vocabulary is every word feature seen in at
   least two training texts, plus every cue.
2. **Model**: logistic regression (Newton steps, L2 penalty on the weights, not the bias); the penalty is the
   one of ``--ridges`` with the lowest 5-fold cross-validated log loss on train (folds seeded by ``--seed``).
3. **Report**: on the test split, at ``ENGRAM_NOISE_THRESHOLD`` (the setting's default): precision and recall
   of *noise* (what the default retention policy archives) and the share of facts kept, overall and per style.

``--write`` stores the weights, the version (a hash of the weights: the backfill re-scores rows another model
scored) and these figures in ``engram_pipeline/data/information.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from train_judge import fit as fit_logistic  # noqa: E402

from engram_pipeline.information import CUES, MODEL_FILE, InformationModel, design_matrix, features  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402

DATA = ROOT / "bench" / "data" / "information" / "labelled.jsonl"
OUT = ROOT / "engram_pipeline" / "data" / MODEL_FILE
STYLES = ("first", "third", "dialogue")
FOLDS = 5
MIN_COUNT = 2


def load(path: Path = DATA) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def vocabulary(texts: list[str]) -> list[str]:
    seen = Counter(name for t in texts for name in features(t) if name.startswith("w:"))
    return sorted(name for name, n in seen.items() if n >= MIN_COUNT) + [f"cue:{c}" for c in CUES]


def fit(x: np.ndarray, y: np.ndarray, ridge: float) -> tuple[np.ndarray, float]:
    """The judge's logistic regression (``train_judge.fit``), with more Newton steps for the wide word design."""
    return fit_logistic(x, y, ridge, steps=100, jitter=1e-9, tol=1e-9)


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-9, 1 - 1e-9)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def predict(x: np.ndarray, w: np.ndarray, b: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x @ w + b)))


def choose_ridge(texts: list[str], y: np.ndarray, ridges: list[float], seed: int) -> tuple[float, dict[float, float]]:
    folds = np.random.default_rng(seed).permutation(len(texts)) % FOLDS
    losses = {}
    for ridge in ridges:
        p = np.zeros(len(texts))
        for f in range(FOLDS):
            tr, te = folds != f, folds == f
            names = vocabulary([t for t, keep in zip(texts, tr, strict=True) if keep])
            x = design_matrix(texts, names)
            w, b = fit(x[tr], y[tr], ridge)
            p[te] = predict(x[te], w, b)
        losses[ridge] = log_loss(p, y)
    return min(losses, key=lambda r: (losses[r], r)), losses


def figures(scores: np.ndarray, labels: list[str], styles: list[str], threshold: float) -> dict[str, object]:
    """Noise precision / recall and facts kept at ``threshold`` (noise: score < threshold)."""

    def one(mask: np.ndarray) -> dict[str, float | int]:
        noise = np.array([lab == "noise" for lab in labels])[mask]
        called = scores[mask] < threshold
        tp = int((called & noise).sum())
        return {
            "facts": int((~noise).sum()),
            "noise": int(noise.sum()),
            "noise_precision": round(tp / max(1, int(called.sum())), 4),
            "noise_recall": round(tp / max(1, int(noise.sum())), 4),
            "facts_kept": round(float((~called & ~noise).sum()) / max(1, int((~noise).sum())), 4),
        }

    out: dict[str, object] = {"all": one(np.ones(len(labels), dtype=bool))}
    for style in STYLES:
        out[style] = one(np.array([s == style for s in styles]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--ridges", type=float, nargs="+", default=[0.1, 0.3, 1.0, 3.0, 10.0])
    parser.add_argument("--write", action="store_true", help=f"store the model in engram_pipeline/data/{MODEL_FILE}")
    args = parser.parse_args()
    rows = load()
    train = [r for r in rows if r["split"] == "train"]
    test = [r for r in rows if r["split"] == "test"]
    texts = [r["text"] for r in train]
    y = np.array([r["label"] == "fact" for r in train], dtype=float)
    ridge, losses = choose_ridge(texts, y, args.ridges, args.seed)
    names = vocabulary(texts)
    x = design_matrix(texts, names)
    w, b = fit(x, y, ridge)
    weights = {n: round(float(v), 4) for n, v in zip(names, w, strict=True) if round(float(v), 4) != 0.0}
    means = {n: round(float(v), 4) for n, v in zip(names, x.mean(axis=0), strict=True) if n in weights}
    body = json.dumps({"bias": round(b, 4), "weights": weights}, sort_keys=True)
    version = "lr-" + hashlib.sha256(body.encode()).hexdigest()[:10]
    fitted = InformationModel(version, round(b, 4), weights, means)
    threshold = Settings().noise_threshold
    report = {}
    for name, part in (("train", train), ("test", test)):
        scores = np.array([fitted.score(r["text"]) for r in part])
        report[name] = figures(scores, [r["label"] for r in part], [r["style"] for r in part], threshold)
    print(f"labelled set: {len(rows)} rows ({Counter(r['label'] for r in rows)}), train {len(train)}, test {len(test)}")
    print(f"ridge {ridge} (5-fold log loss: {', '.join(f'{r}: {v:.3f}' for r, v in losses.items())})")
    print(f"features: {len(names)} ({len(names) - len(CUES)} words, {len(CUES)} cues); version {version}")
    print(f"at ENGRAM_NOISE_THRESHOLD={threshold} (noise: score below it)")
    print("| split | style | facts | noise | noise precision | noise recall | facts kept |")
    print("|---|---|---|---|---|---|---|")
    for split, parts in report.items():
        for style, f in parts.items():  # type: ignore[attr-defined]
            print(
                f"| {split} | {style} | {f['facts']} | {f['noise']} | {f['noise_precision']:.3f} | "
                f"{f['noise_recall']:.3f} | {f['facts_kept']:.3f} |"
            )
    wrong = [(r["label"], round(fitted.score(r["text"]), 3), r["text"]) for r in test]
    wrong = [x for x in wrong if (x[0] == "noise") != (x[1] < threshold)]
    print("held-out mistakes:", *wrong, sep="\n  ") if wrong else print("held-out mistakes: none")
    if args.write:
        data = {
            "version": version,
            "bias": round(b, 4),
            "weights": weights,
            "means": means,
            "trained_on": f"bench/data/information/labelled.jsonl, split=train ({len(train)} rows)",
            "ridge": ridge,
            "seed": args.seed,
            "threshold": threshold,
            "figures": report,
        }
        OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
