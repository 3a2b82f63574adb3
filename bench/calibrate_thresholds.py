"""Calibrate an embedder's threshold profile on the STS pairs and report it on held-out files.

    python bench/calibrate_thresholds.py --embedder minilm [--write]

Data: ``bench/data/sts/*.tsv``, in the repository (its README names the source)
(``score<TAB>a<TAB>b``, 0-5, empty score skipped). The files are split,
once and for all, by year: **calibration** = every 2014-* and 2015-* file (4,500 labelled pairs);
**held out** = every 2016-* file (1,186 pairs from five other sources: answers, headlines, plagiarism,
post-editing, questions). Thresholds are chosen on calibration files only; every figure printed under
"held out" comes from files the choice never saw.

What a label means here (STS guidelines): 5 "completely equivalent", 4 "mostly equivalent, unimportant
details differ", 3 "roughly equivalent, important information differs".

- ``duplicate_threshold``: the lowest cosine at which ``merge_guard.is_duplicate`` (cosine plus the hard
  vetoes) keeps precision >= 0.98 for score >= 4.6 (same fact reworded) at every higher threshold with at
  least 20 pairs above it; 0.99 when no cosine gets there (all-MiniLM-L6-v2: STS scores many near-verbatim
  pairs 3.x because one detail differs).
- ``merge_threshold``: the lowest cosine at which the *guarded* merge decision (``merge_guard.merge_decision``)
  keeps precision >= 0.95, where a merge is right when the pair scores >= 4.0: the canonical row survives,
  the others are superseded (restorable), so "unimportant details differ" is an acceptable merge.
- ``contradiction_threshold``: the 25th percentile of cosine over pairs scoring 2.5-4.6 (same topic, a
  different claim or detail): the candidate band starts where those pairs concentrate; lowered, if needed, to
  the 5th percentile of :data:`VALUE_SWAPS`, short facts whose value changed ("User lives in Berlin" /
  "User lives in Munich"), the commonest contradiction in agent memory (MiniLM scores them 0.5-0.8, below
  most STS same-topic pairs). The rules confirm every candidate lexically, so a low floor costs compute only.
- ``contradiction_threshold_max``: at least ``duplicate_threshold`` and above 99% of a synthetic
  contradiction set (a negation inserted, a number changed) built from the calibration sentences: a pair
  that contradicts must reach the contradiction rules even when its cosine is in the duplicate zone
  (``merge_guard.is_duplicate`` refuses it there).

The contradiction figure: the held-out sentences, each with a negation inserted or removed after a
copula or auxiliary ("is" -> "is not", "has" -> "does not have", "is not" -> "is") or a number changed
(n -> n + 1); the report gives the share plain cosine would merge and the share the guarded decision merges.
Embeddings are cached in ``--cache-dir`` (default /tmp/engram-calibration).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engram_pipeline.embed import Embedder, EmbedderError, get_embedder, load_profile  # noqa: E402
from engram_pipeline.merge_guard import MIN_CONTAINMENT, conflict, containment, is_duplicate, merge_decision  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402

STS = ROOT / "bench" / "data" / "sts"  # the one place the calibration data is found (tests import it too)
CALIBRATION_FILES = (
    "2014-headlines.tsv",
    "2014-images.tsv",
    "2015-answers-forums.tsv",
    "2015-answers-students.tsv",
    "2015-belief.tsv",
    "2015-headlines.tsv",
    "2015-images.tsv",
)
HELD_OUT_FILES = (
    "2016-answer-answer.tsv",
    "2016-headlines.tsv",
    "2016-plagiarism.tsv",
    "2016-postediting.tsv",
    "2016-question-question.tsv",
)
SAME_FACT = 4.6  # duplicate: the same fact reworded
MERGE_OK = 4.0  # merge: mostly equivalent, unimportant details differ
DUPLICATE_PRECISION = 0.98
MERGE_PRECISION = 0.95
MIN_SUPPORT = 20
DESIGN_DEFAULT_MERGE = 0.85


@dataclass(frozen=True)
class Pairs:
    score: np.ndarray
    a: list[str]
    b: list[str]
    cos: np.ndarray


def load(files: tuple[str, ...]) -> tuple[np.ndarray, list[str], list[str]]:
    scores, left, right = [], [], []
    for name in files:
        for line in (STS / name).read_text(encoding="utf-8").splitlines():
            score, a, b = (line.split("\t") + ["", ""])[:3]
            if score.strip() and a.strip() and b.strip():
                scores.append(float(score))
                left.append(a.strip())
                right.append(b.strip())
    return np.asarray(scores), left, right


def embed_cached(embedder: Embedder, sentences: list[str], cache_dir: Path) -> dict[str, np.ndarray]:
    """Vectors of ``sentences``; each embedder keeps one cache file and embeds only what it lacks."""
    path = cache_dir / f"{embedder.name}-{embedder.dimension}.npz"
    cache: dict[str, np.ndarray] = {}
    if path.exists():
        with np.load(path) as stored:
            cache = dict(zip(stored["sentences"].tolist(), stored["vectors"], strict=True))
    missing = sorted(set(sentences) - cache.keys())
    if missing:
        started = time.perf_counter()
        vectors = embedder.embed(missing)
        took = time.perf_counter() - started
        print(f"  embedded {len(missing)} sentences in {took:.1f}s ({len(missing) / took:.0f}/s)", file=sys.stderr)
        cache.update(zip(missing, vectors, strict=True))
        cache_dir.mkdir(parents=True, exist_ok=True)
        keys = sorted(cache)
        np.savez(path, sentences=np.asarray(keys), vectors=np.stack([cache[k] for k in keys]))
    return {s: cache[s] for s in sentences}


def pairs(embedder: Embedder, files: tuple[str, ...], cache_dir: Path) -> Pairs:
    score, a, b = load(files)
    vec = embed_cached(embedder, a + b, cache_dir)
    cos = np.asarray([float(vec[x] @ vec[y]) for x, y in zip(a, b, strict=True)])
    return Pairs(score, a, b, cos)


def lowest_threshold(cos: np.ndarray, right: np.ndarray, allowed: np.ndarray, target: float) -> float | None:
    """The lowest t such that decisions ``allowed & cos >= t'`` have precision >= target for every t' >= t."""
    order = np.argsort(-cos)
    decided = allowed[order]
    tp = np.cumsum(right[order] & decided)
    n = np.cumsum(decided)
    precision = np.divide(tp, n, out=np.ones(len(n)), where=n > 0)
    bad = (n >= MIN_SUPPORT) & (precision < target)
    if bad.all():
        return None
    stop = int(np.argmax(bad)) if bad.any() else len(order)  # first prefix that fails
    ok = [i for i in range(stop) if decided[i] and n[i] >= MIN_SUPPORT]
    return float(np.ceil(cos[order][ok[-1]] * 1000) / 1000) if ok else None


# Value swaps of short facts: the contradictions agents meet most. Held in the script (not STS data).
VALUE_SWAPS = [
    ("User lives in Berlin.", "User lives in Munich."),
    ("User prefers R.", "User prefers Python."),
    ("User prefers vim.", "User prefers emacs."),
    ("User's editor is Neovim.", "User's editor is VS Code."),
    ("User works at Acme Corp.", "User works at Globex."),
    ("Customer's plan is Pro.", "Customer's plan is Enterprise."),
    ("The meeting is at 3pm.", "The meeting is at 4pm."),
    ("User prefers window seats.", "User prefers aisle seats."),
    ("The user's language is Spanish.", "The user's language is German."),
    ("The team uses Jira.", "The team uses Linear."),
    ("User is based in Lisbon.", "User is based in Porto."),
    ("The default branch is main.", "The default branch is master."),
    ("User likes tea.", "User dislikes tea."),
    ("User drinks coffee.", "User does not drink coffee."),
    ("The database is Postgres.", "The database is MySQL."),
    ("The deadline is Friday.", "The deadline is Monday."),
]


def calibrate(
    cal: Pairs, synthetic_cos: np.ndarray, swap_cos: np.ndarray
) -> tuple[dict[str, float], dict[float, tuple[float, float]]]:
    hard_ok = np.asarray([conflict(x, y) is None for x, y in zip(cal.a, cal.b, strict=True)])
    overlap = np.asarray([containment(x, y) for x, y in zip(cal.a, cal.b, strict=True)])
    same, good = cal.score >= SAME_FACT, cal.score >= MERGE_OK
    # the duplicate decision is is_duplicate: cosine plus the hard vetoes
    found = lowest_threshold(cal.cos, same, hard_ok, DUPLICATE_PRECISION)
    if found is None:
        print(f"  no cosine reaches duplicate precision {DUPLICATE_PRECISION} on calibration: using 0.99")
    dup = found or 0.99
    sweep: dict[float, tuple[float, float]] = {}
    for minimum in (0.0, 0.3, 0.4, 0.5, 0.6, 0.7):
        allowed = hard_ok & ((cal.cos >= dup) | (overlap >= minimum))
        t = lowest_threshold(cal.cos, good, allowed, MERGE_PRECISION)
        if t is not None:
            decided = allowed & (cal.cos >= t)
            sweep[minimum] = (min(t, dup - 0.01), float((decided & good).sum() / good.sum()))
    merge = sweep.get(MIN_CONTAINMENT, (dup - 0.01, 0.0))[0]
    topic = cal.cos[(cal.score >= 2.5) & (cal.score < SAME_FACT)]
    low = float(np.floor(min(np.quantile(topic, 0.25), np.quantile(swap_cos, 0.05)) * 100) / 100)
    high = float(min(1.0, max(dup, np.ceil(np.quantile(synthetic_cos, 0.99) * 100) / 100)))
    profile = {
        "duplicate_threshold": round(dup, 3),
        "merge_threshold": round(merge, 3),
        "contradiction_threshold": round(min(low, high - 0.01), 3),
        "contradiction_threshold_max": round(high, 3),
    }
    return profile, sweep


def negate(sentence: str) -> str | None:
    """The sentence with its first copula or auxiliary negated (or its negation removed)."""
    undo = re.sub(r"\b(is|are|was|were|can|will|does|do|did|has|have|had) not\b", r"\1", sentence, count=1)
    if undo != sentence:
        return undo
    m = re.search(r"\b(is|are|was|were|can|will|could|would|should|must|has|have|had)\b(\s+(\w+))?", sentence)
    if m is None:
        return None
    verb, nxt = m.group(1), (m.group(3) or "")
    if verb in ("has", "have", "had") and not (nxt == "been" or nxt.endswith(("ed", "en"))):
        replacement = {"has": "does not have", "have": "do not have", "had": "did not have"}[verb]
    else:
        replacement = "cannot" if verb == "can" else f"{verb} not"
    return sentence[: m.start(1)] + replacement + sentence[m.end(1) :]


def renumber(sentence: str) -> str | None:
    m = re.search(r"\b\d+\b", sentence)
    return None if m is None else sentence[: m.start()] + str(int(m.group()) + 1) + sentence[m.end() :]


def contradiction_set(sentences: list[str]) -> tuple[list[str], list[str], list[str]]:
    left, right, kinds = [], [], []
    for s in sorted(set(sentences)):
        for kind, changed in (("negation", negate(s)), ("number", renumber(s))):
            if changed is not None and changed != s:
                left.append(s)
                right.append(changed)
                kinds.append(kind)
    return left, right, kinds


def cosines(embedder: Embedder, a: list[str], b: list[str], cache_dir: Path) -> np.ndarray:
    vec = embed_cached(embedder, a + b, cache_dir)
    return np.asarray([float(vec[x] @ vec[y]) for x, y in zip(a, b, strict=True)])


def row(label: str, decided: np.ndarray, right: np.ndarray) -> str:
    n, tp = int(decided.sum()), int((decided & right).sum())
    precision = f"{tp / n:.3f}" if n else "  -  "
    return f"  {label:<44} {n:>6} {precision:>9} {tp / max(1, int(right.sum())):>7.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", choices=("hashing", "minilm", "openai"), required=True)
    parser.add_argument("--write", action="store_true", help="write engram_pipeline/embed/profiles/<embedder>.json")
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/engram-calibration"))
    args = parser.parse_args()

    base = Settings.from_env().replace(embedder=args.embedder)
    embedder = get_embedder(base)
    print(f"embedder {embedder.name} (dim {embedder.dimension})")
    cal = pairs(embedder, CALIBRATION_FILES, args.cache_dir)
    held = pairs(embedder, HELD_OUT_FILES, args.cache_dir)
    syn_a, syn_b, _ = contradiction_set(cal.a + cal.b)
    swap_a, swap_b = [a for a, _ in VALUE_SWAPS], [b for _, b in VALUE_SWAPS]
    swap_cos = cosines(embedder, swap_a, swap_b, args.cache_dir)
    profile, sweep = calibrate(cal, cosines(embedder, syn_a, syn_b, args.cache_dir), swap_cos)
    print(f"value swaps: cosine {np.quantile(swap_cos, 0.05):.3f} (5th pct) to {swap_cos.max():.3f} (max)")
    print(f"calibration: {len(cal.cos)} pairs from {', '.join(CALIBRATION_FILES)}")
    print(f"profile: {json.dumps(profile)}")
    print(f"  containment minimum -> (merge threshold, calibration recall at >= {MERGE_PRECISION} precision):")
    for minimum, (t, recall) in sweep.items():
        print(f"    {minimum:.1f}{' (shipped)' if minimum == MIN_CONTAINMENT else ''}: {t:.3f}, {recall:.3f}")

    settings = Settings().with_profile(profile)
    same, good = held.score >= SAME_FACT, held.score >= MERGE_OK
    zipped = list(zip(held.a, held.b, held.cos.tolist(), strict=True))
    print(
        f"\nheld out: {len(held.cos)} pairs from {', '.join(HELD_OUT_FILES)}; "
        f"{int(same.sum())} score >= {SAME_FACT}, {int(good.sum())} score >= {MERGE_OK}"
    )
    print(f"  {'decision':<44} {'pairs':>6} {'precision':>9} {'recall':>7}")
    dup = settings.duplicate_threshold
    print(row(f"duplicate, plain cosine >= {dup}", held.cos >= dup, same))
    print(
        row("duplicate, is_duplicate (cosine + vetoes)", np.asarray([is_duplicate(*z, settings) for z in zipped]), same)
    )
    for threshold, note in ((settings.merge_threshold, "profile"), (DESIGN_DEFAULT_MERGE, "DESIGN default")):
        if threshold >= dup:
            continue
        s = settings.replace(merge_threshold=threshold)
        guarded = np.asarray([merge_decision(*z, s).merge for z in zipped])
        print(row(f"merge, plain cosine >= {threshold} ({note})", held.cos >= threshold, good))
        print(row(f"merge, merge_decision at {threshold} ({note})", guarded, good))
        if note == "profile":
            print(row("  same decision, counting only score >= 4.6 right", guarded, same))

    con_a, con_b, kinds = contradiction_set(held.a + held.b)
    con_cos = cosines(embedder, con_a, con_b, args.cache_dir)
    kind = np.asarray(kinds)
    guarded = np.asarray(
        [merge_decision(a, b, c, settings).merge for a, b, c in zip(con_a, con_b, con_cos, strict=True)]
    )
    fired = np.asarray([conflict(a, b) is not None for a, b in zip(con_a, con_b, strict=True)])
    band = (con_cos >= settings.contradiction_threshold) & (con_cos < settings.contradiction_threshold_max)
    print(
        f"\ncontradiction set from the held-out sentences: {len(con_cos)} pairs "
        f"({int((kind == 'negation').sum())} negation, {int((kind == 'number').sum())} number)"
    )
    print(f"  {'share of pairs':<44} {'all':>6} {'negation':>9} {'number':>7}")
    for label, mask in (
        (f"plain cosine >= merge {settings.merge_threshold}", con_cos >= settings.merge_threshold),
        (f"plain cosine >= {DESIGN_DEFAULT_MERGE} (DESIGN default)", con_cos >= DESIGN_DEFAULT_MERGE),
        ("merged by merge_decision", guarded),
        ("contradiction rules or vetoes fire", fired),
        ("in the contradiction candidate band", band),
    ):
        shares = [mask.mean(), mask[kind == "negation"].mean(), mask[kind == "number"].mean()]
        print(f"  {label:<44} " + " ".join(f"{x:>{w}.3f}" for x, w in zip(shares, (6, 9, 7), strict=True)))

    if args.write:
        path = ROOT / "engram_pipeline" / "embed" / "profiles" / f"{args.embedder}.json"
        doc = {
            "embedder": embedder.name,
            "calibrated_by": f"python bench/calibrate_thresholds.py --embedder {args.embedder} --write",
            "calibration_files": list(CALIBRATION_FILES),
            "held_out_files": list(HELD_OUT_FILES),
            "thresholds": profile,
        }
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {path.relative_to(ROOT)}")
    elif args.embedder != "openai":
        try:
            shipped = load_profile(args.embedder)
        except EmbedderError:
            shipped = {}
        if shipped != profile:
            print(f"\nshipped profile differs: {json.dumps(shipped)} (run with --write to update it)")


if __name__ == "__main__":
    main()
