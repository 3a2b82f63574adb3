"""Does the pipeline forget noise or facts? Evidence recall on a dialogue corpus, before and after the passes.

    python bench/bench_decay_safety.py                       # 10 agents x 12 sessions x 50 turns, MiniLM
    python bench/bench_decay_safety.py --embedder hashing --agents 3 --sessions 6 --turns 20   # quick

Corpus: :func:`tests.corpora.dialogues.dialogue_corpus`, written for this project (several speakers per
agent, facts stated once and never repeated, facts restated in other words, changes of mind, small talk),
imported as episodic memories; every question knows the turns that answer it.

For each retention policy (``safe`` and ``seed``, the inherited pruning; ``--policies signal,safe,seed`` adds the
default, whose noise rule ``bench_convergence.py`` measures) and each time after the last session (+0, +30, +90,
+365 days), measured in the same run:

- *before*: recall on a copy of the imported store that no pass touched, at that ``now``: the reference;
- *after*: recall on a store the full pipeline ran over at every earlier offset and at this one.

recall@k is the share of questions with an evidence turn among the first k ids recall returns (a derived hit's
evidence counts, see ``tests.corpora.dialogues.ranked_ids``); nothing is recalled between runs. It prints
recall@5/10/20 before and after, after/before as a ratio, recall@10 per age bucket of the evidence (the age
of the newest evidence turn at that ``now``) and the store's size (visible / total rows).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from results import Results  # noqa: E402

from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.lifecycle.health import health  # noqa: E402
from engram_pipeline.lifecycle.pipeline import run_pipeline  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402
from tests.corpora.dialogues import Question, dialogue_corpus, evidence_recall  # noqa: E402

OFFSETS = (0, 30, 90, 365)
KS = (5, 10, 20)
BUCKETS = ((0, 30), (30, 90), (90, 365), (365, 10_000))


def bucket_of(q: Question, turns: dict[str, str], now) -> str:
    from datetime import datetime

    newest = max(datetime.fromisoformat(turns[i]) for i in q.evidence)
    age = (now - newest).total_seconds() / 86400
    lo, hi = next(b for b in BUCKETS if b[0] <= age < b[1])
    return f"{lo}-{hi}d" if hi < 10_000 else f">{lo}d"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--sessions", type=int, default=12)
    ap.add_argument("--turns", type=int, default=50, help="turns per session")
    ap.add_argument("--embedder", default="minilm", choices=["minilm", "hashing"])
    ap.add_argument("--policies", default="safe,seed")
    args = ap.parse_args()
    results = Results("decay_safety", args)

    corpus = dialogue_corpus(agents=args.agents, sessions=args.sessions, turns_per_session=args.turns)
    agents = sorted({q.agent_id for q in corpus.questions})
    created = {t["id"]: t["created_at"] for t in corpus.turns}
    print(
        f"corpus: {len(agents)} agents, {len(corpus.turns)} turns, {len(corpus.questions)} questions "
        f"({sum(q.kind == 'once' for q in corpus.questions)} once, "
        f"{sum(q.kind == 'restated' for q in corpus.questions)} restated, "
        f"{sum(q.kind == 'changed' for q in corpus.questions)} changed), embedder {args.embedder}"
    )
    results.add(
        "corpus",
        agents=len(agents),
        turns=len(corpus.turns),
        questions=len(corpus.questions),
        **{kind: sum(q.kind == kind for q in corpus.questions) for kind in ("once", "restated", "changed")},
    )
    root = Path(tempfile.mkdtemp(prefix="decay-safety-"))
    try:
        base = Settings.from_env({"ENGRAM_EMBEDDER": args.embedder})
        pristine = root / "pristine"
        start = time.perf_counter()
        imported = import_jsonl(MemoryStore.open(str(pristine), settings=base), corpus.turns)
        took = time.perf_counter() - start
        print(f"import: {imported.created} rows in {took:.1f} s (exact repeats collapsed)\n")
        results.add("import", rows=imported.created, seconds=took)
        untouched = MemoryStore.open(str(pristine), settings=base)
        before = {d: evidence_recall(untouched, corpus.questions, now=corpus.end + timedelta(days=d), ks=KS)
                  for d in OFFSETS}  # fmt: skip
        for policy in args.policies.split(","):
            settings = base.replace(retention_policy=policy)
            path = root / policy
            shutil.copytree(pristine, path)
            store = MemoryStore.open(str(path), settings=settings)
            print(f"policy {policy}")
            print("  +days | recall@5  before after | recall@10 before after | recall@20 before after | "
                  "after/before @10 | visible/total | pipeline s")  # fmt: skip
            per_bucket: list[str] = []
            for d in OFFSETS:
                now = corpus.end + timedelta(days=d)
                t = time.perf_counter()
                for agent in agents:
                    run_pipeline(store, agent, now=now)
                seconds = time.perf_counter() - t
                after = evidence_recall(store, corpus.questions, now=now, ks=KS)
                b = before[d]
                visible = total = 0
                for agent in agents:
                    h = health(store, agent, now=now)
                    visible, total = visible + h.visible, total + h.total
                ratio = after[10] / b[10] if b[10] else float("nan")
                print(
                    f"  {d:>5} |          {b[5]:.3f} {after[5]:.3f} |           {b[10]:.3f} {after[10]:.3f} |"
                    f"           {b[20]:.3f} {after[20]:.3f} | {ratio:16.3f} | {visible:>6}/{total:<6} | {seconds:8.1f}"
                )
                results.add(
                    "recall",
                    policy=policy,
                    days=d,
                    **{f"{when}_at_{k}": float(r[k]) for k in KS for when, r in (("before", b), ("after", after))},
                    after_over_before_at_10=ratio,
                    visible=visible,
                    total=total,
                    pipeline_s=seconds,
                )
                groups: dict[str, list[Question]] = {}
                for q in corpus.questions:
                    groups.setdefault(bucket_of(q, created, now), []).append(q)
                cells = []
                for name, qs in sorted(groups.items(), key=lambda kv: int(kv[0].strip(">").split("-")[0].rstrip("d"))):
                    b10 = evidence_recall(untouched, qs, now=now, ks=(10,))[10]
                    a10 = evidence_recall(store, qs, now=now, ks=(10,))[10]
                    cells.append(f"{name} (n={len(qs)}): {b10:.3f} -> {a10:.3f}")
                    results.add(
                        "recall_at_10_by_evidence_age",
                        policy=policy,
                        days=d,
                        age=name,
                        questions=len(qs),
                        before=float(b10),
                        after=float(a10),
                    )
                per_bucket.append(f"  +{d}d recall@10 by evidence age: " + "; ".join(cells))
            print("\n".join(per_bucket) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
