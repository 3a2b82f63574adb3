"""Train the calibrated merge judge of an embedder on STS 2014-2015 and report it on the held-out 2016 files.

    python bench/train_judge.py --embedder minilm [--write]

Same data, split and embedding cache as ``bench/calibrate_thresholds.py``. A merge is right when the pair
scores >= 4.0 ("mostly equivalent"); recall is over *every* held-out pair scoring >= 4.0, so pairs below the
candidate floor count as missed.

1. **Candidate floor**: the 5th percentile of cosine over calibration pairs scoring >= 4.0, rounded down to
   0.05: the judge sees 95% of the merges worth making, and the neighbour graph stays small.
2. **Model**: logistic regression (Newton steps, L2 penalty, standardised features of
   :func:`engram_pipeline.judge.features`) on the calibration pairs at or above the floor that no hard veto
   refuses (a vetoed pair is a contradiction whatever the model says).
3. **Threshold**: the lowest probability whose 5-fold cross-validated precision on calibration stays >=
   ``--precision`` (0.95) at every higher threshold with at least 20 decisions above it.

The report: held-out precision / recall of each decision (the rules judge at the profile band and at 0.85,
the calibrated judge), the share of a contradicting set that each merges (held-out sentences with a negation
inserted or removed or a number changed, plus the short value swaps), and the judge's time per pair.
``--write`` stores ``engram_pipeline/judges/<embedder>.json`` with the weights and these figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calibrate_thresholds import (  # noqa: E402
    CALIBRATION_FILES,
    HELD_OUT_FILES,
    MERGE_OK,
    MIN_SUPPORT,
    VALUE_SWAPS,
    contradiction_set,
    cosines,
    pairs,
)

from engram_pipeline.embed import get_embedder  # noqa: E402
from engram_pipeline.judge import FEATURES, CalibratedJudge, Judge, RulesJudge, features  # noqa: E402
from engram_pipeline.merge_guard import conflict  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402

RIDGE = 1.0
FOLDS = 5


def fit(
    x: np.ndarray, y: np.ndarray, ridge: float = RIDGE, *, steps: int = 50, jitter: float = 0.0, tol: float = 1e-8
) -> tuple[np.ndarray, float]:
    """Weights and bias of an L2-penalised logistic regression on standardised ``x`` (Newton's method, at most
    ``steps``; ``jitter`` on the Hessian's diagonal keeps a wide sparse design solvable). Also fits the
    information score (``bench/train_information.py``)."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    w = np.zeros(d + 1)
    penalty = np.full(d + 1, ridge)
    penalty[-1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + penalty * w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + np.diag(penalty)
        if jitter:
            hess = hess + jitter * np.eye(d + 1)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < tol:
            break
    return w[:-1], float(w[-1])


def lowest_probability(p: np.ndarray, right: np.ndarray, target: float) -> float:
    """The lowest threshold t with precision >= target for every t' >= t (>= MIN_SUPPORT decisions)."""
    order = np.argsort(-p)
    tp = np.cumsum(right[order])
    n = np.arange(1, len(order) + 1)
    bad = (n >= MIN_SUPPORT) & (tp / n < target)
    stop = int(np.argmax(bad)) if bad.any() else len(order)
    return float(p[order][max(stop - 1, 0)])


def feature_matrix(a: list[str], b: list[str], cos: np.ndarray) -> np.ndarray:
    return np.asarray([features(x, y, c) for x, y, c in zip(a, b, cos.tolist(), strict=True)])


def row(label: str, decided: np.ndarray, right: np.ndarray) -> str:
    n, tp = int(decided.sum()), int((decided & right).sum())
    precision = f"{tp / n:.3f}" if n else "  -  "
    return f"  {label:<46} {n:>6} {precision:>9} {tp / max(1, int(right.sum())):>7.3f}"


def merged(judge: Judge, a: list[str], b: list[str], cos: np.ndarray) -> np.ndarray:
    return np.asarray([v.merge for v in judge.judge(list(zip(a, b, cos.tolist(), strict=True)))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", choices=("hashing", "minilm"), required=True)
    parser.add_argument("--precision", type=float, default=0.95, help="calibration precision target")
    parser.add_argument("--write", action="store_true", help="write engram_pipeline/judges/<embedder>.json")
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/engram-calibration"))
    args = parser.parse_args()

    settings = Settings().replace(embedder=args.embedder)
    embedder = get_embedder(settings)
    settings = Settings(embedder=args.embedder).with_profile(embedder.profile)
    cal = pairs(embedder, CALIBRATION_FILES, args.cache_dir)
    held = pairs(embedder, HELD_OUT_FILES, args.cache_dir)
    good_cal = cal.score >= MERGE_OK
    floor = float(np.floor(np.quantile(cal.cos[good_cal], 0.05) * 20) / 20)
    ok_cal = np.asarray([conflict(x, y) is None for x, y in zip(cal.a, cal.b, strict=True)])
    train = ok_cal & (cal.cos >= floor)
    x_all = feature_matrix(cal.a, cal.b, cal.cos)
    x, y = x_all[train], good_cal[train].astype(np.float64)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    # Cross-validated probabilities pick the threshold, so it is not tuned on the pairs the weights saw.
    folds = np.random.default_rng(0).integers(0, FOLDS, len(y))
    cv = np.zeros(len(y))
    for k in range(FOLDS):
        w, b = fit(z[folds != k], y[folds != k])
        cv[folds == k] = 1.0 / (1.0 + np.exp(-(z[folds == k] @ w + b)))
    threshold = round(lowest_probability(cv, y.astype(bool), args.precision), 4)
    w, b = fit(z, y)
    doc = {
        "embedder": embedder.name,
        "trained_by": f"python bench/train_judge.py --embedder {args.embedder} --write",
        "calibration_files": list(CALIBRATION_FILES),
        "held_out_files": list(HELD_OUT_FILES),
        "features": list(FEATURES),
        "mean": [round(float(v), 6) for v in mean],
        "scale": [round(float(v), 6) for v in scale],
        "weights": [round(float(v), 6) for v in w],
        "bias": round(b, 6),
        "threshold": threshold,
        "floor": floor,
    }
    judge = CalibratedJudge(doc)
    print(f"embedder {embedder.name}: floor {floor}, {int(train.sum())} training pairs, threshold p >= {threshold}")
    print("  weights: " + ", ".join(f"{n} {v:+.2f}" for n, v in zip(FEATURES, w, strict=True)))

    good = held.score >= MERGE_OK
    print(f"\nheld out: {len(held.cos)} pairs, {int(good.sum())} score >= {MERGE_OK}")
    print(f"  {'decision':<46} {'pairs':>6} {'precision':>9} {'recall':>7}")
    figures: dict[str, dict[str, float]] = {}
    contra_a, contra_b, _ = contradiction_set(held.a + held.b)
    contra_a += [s for s, _ in VALUE_SWAPS]
    contra_b += [t for _, t in VALUE_SWAPS]
    contra_cos = cosines(embedder, contra_a, contra_b, args.cache_dir)
    judges: list[tuple[str, Judge]] = [
        (f"rules at profile band {settings.merge_threshold}", RulesJudge(settings)),
        ("rules at 0.85", RulesJudge(settings.replace(merge_threshold=min(0.85, settings.duplicate_threshold - 0.01)))),
        (f"calibrated (floor {floor}, p >= {threshold})", judge),
    ]
    for label, j in judges:
        decided = merged(j, held.a, held.b, held.cos)
        contra = merged(j, contra_a, contra_b, contra_cos)
        n, tp = int(decided.sum()), int((decided & good).sum())
        figures[label] = {
            "precision": round(tp / max(1, n), 3),
            "recall": round(tp / max(1, int(good.sum())), 3),
            "contradicting_merged": round(float(contra.mean()), 4),
        }
        print(row(label, decided, good) + f"   contradicting merged {contra.mean():.2%} of {len(contra)}")
    sample = list(zip(held.a, held.b, held.cos.tolist(), strict=True))[:500]
    started = time.perf_counter()
    judge.judge(sample)
    per_pair = (time.perf_counter() - started) / len(sample)
    print(f"\ncalibrated judge: {per_pair * 1e6:.0f} us per pair (features, vetoes and the model)")
    if args.write:
        doc["held_out"] = figures
        path = ROOT / "engram_pipeline" / "judges" / f"{args.embedder}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
