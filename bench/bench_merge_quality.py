"""How well each judge decides same fact / contradiction on held-out public pairs, what the rewordings scenario
leaves visible, and how many wrong merges the corpus-merge plan holds next to a plain-cosine plan.

    python bench/bench_merge_quality.py [--limit 400] [--band 0.85] [--only decisions|scenario|plan]

**Decisions** (``--only decisions``): every judge's decision on held-out pairs, as every pass takes it (a
merge is a ``duplicate`` verdict; a flag is a contradiction the judge records in the contradiction band):
the MSR paraphrase test split (1,725 news pairs, human-labelled), SICK 2014's test contradictions (720 pairs)
and the STS 2016 pairs (a merge is right at score >= 4.0). Judges: plain cosine at 0.85, the rules at the
MiniLM profile, the calibrated judge (today's default without the pair model) and the pair model. Never
trained on: ``training/pair_model/MANIFEST.json`` lists these files as its test split.

**Scenario** (``--only scenario``): the 22 writes of ``tests/scenarios.py`` (5 facts in 3 wordings, 5 exact
repeats, a value swap and its repeat) through ``import`` (remember's checks), a corpus-merge plan and its
apply, then the contradiction pass; visible rows, and whether both sides of the swap stay visible and flagged.

Corpus (all-MiniLM-L6-v2, loaded offline): the **held-out** STS files (2016-*, never used to pick thresholds;
see ``bench/calibrate_thresholds.py``). Two agents in one real store, rows inserted as an import would:

* ``sts``: both sentences of ``--limit`` labelled pairs. A merge of a labelled pair is right when its STS score
  is >= 4.0 ("mostly equivalent"), wrong below; a merge of two sentences from different pairs is unlabelled
  and reported apart. "pairs joined" is the share of pairs scoring >= 4.0 that end up in one cluster.
* ``contra``: held-out sentences next to a contradicting variant (a negation inserted or removed, a number
  changed), as in ``calibrate_thresholds.py``. A merge of a contradicting pair is wrong; "pairs joined" is
  the share of contradicting pairs that end up in one cluster. (STS pairs there keep their labels.)

For each band (``--band``, default the issue's 0.85, and the embedder's calibrated profile) it runs the real
pass, ``consolidate_corpus`` (dry run: the plan a reviewer would see; its merge judge, with the band's
lower end as the judge's floor), and a plain plan: the same star
clusters over the same neighbour graph and the same band, with no merge guard. Then it applies the guarded
plan end to end and times both steps. Figures are counts of (canonical, member) merges.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

sys.path.insert(0, str(ROOT / "training" / "pair_model"))

import corpus  # noqa: E402
from calibrate_thresholds import HELD_OUT_FILES, contradiction_set, embed_cached, load  # noqa: E402
from results import Results  # noqa: E402

from engram_pipeline import pair_model  # noqa: E402
from engram_pipeline.embed import get_embedder, load_profile  # noqa: E402
from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.judge import get_judge, make_judge  # noqa: E402
from engram_pipeline.lifecycle.contradictions import detect_contradictions  # noqa: E402
from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus  # noqa: E402
from engram_pipeline.lifecycle.graph import agent_graph  # noqa: E402
from engram_pipeline.model import content_hash  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.similarity import star_clusters  # noqa: E402
from engram_pipeline.similarity.bands import contradiction_bands, filter_bands, in_bands  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402
from tests.scenarios import REWORDED_FACTS, REWORDING_WRITES, VALUE_SWAP  # noqa: E402

MERGE_OK = 4.0
CACHE = Path("/tmp/engram-calibration")


def insert(store: MemoryStore, agent: str, sentences: list[str]) -> dict[str, str]:
    """Insert unique sentences with their MiniLM vectors; returns sentence -> id."""
    unique = sorted({s for s in sentences if s.strip()}, key=lambda s: content_hash(agent, s))
    by_hash: dict[str, str] = {}
    for s in unique:
        by_hash.setdefault(content_hash(agent, s), s)
    texts = list(by_hash.values())
    cached = embed_cached(store.embedder, texts, CACHE)  # shares calibrate_thresholds.py's embedding cache
    rows = []
    for text in texts:
        row = store.engine.new_row(agent, text, tier="ltm")
        row["vector"] = cached[text].tolist()
        rows.append(row)
    store.engine.insert_rows(rows)
    ids = {r["content_hash"]: r["id"] for r in rows}
    return {s: ids[content_hash(agent, s)] for s in sentences if s.strip()}


def joined(merges: list[tuple[str, str]], pairs: list[frozenset[str]]) -> int:
    """How many ``pairs`` end up in one cluster (as canonical and member, or as two members of one star)."""
    cluster = {m: c for c, m in merges} | {c: c for c, _ in merges}
    return sum(1 for p in pairs if len({cluster.get(x, x) for x in p}) == 1)


def plain_plan(store: MemoryStore, agent: str, graph: Any, lo: float, hi: float) -> list[tuple[str, str]]:
    """Star clusters on cosine alone, same canonical order (importance, newest, id) as the pass."""
    rows = store.engine.scan(agent, columns=["id", "importance", "created_at"]).to_pylist()
    rows.sort(key=lambda r: r["id"])
    rows.sort(key=lambda r: (-(r["importance"] or 0.0), -r["created_at"].timestamp()))
    clusters = star_clusters(filter_bands(graph, ((lo, hi if hi < 1.0 else None),)), [r["id"] for r in rows], lo, hi)
    return [(c, m) for c, members in clusters for m, _ in members]


def guarded_plan(report: Any) -> list[tuple[str, str]]:
    return [(c["canonical_id"], m["id"]) for c in report.per_cluster for m in c["members"]]


def judge(merges: list[tuple[str, str]], labels: dict[frozenset[str], float]) -> tuple[int, int, int]:
    """(right, wrong, unlabelled) among merges."""
    right = wrong = other = 0
    for c, m in merges:
        score = labels.get(frozenset((c, m)))
        if score is None:
            other += 1
        elif score >= MERGE_OK:
            right += 1
        else:
            wrong += 1
    return right, wrong, other


def judges(base: Settings) -> dict[str, Any]:
    """The judges compared, by the name the figures print (the pair model only where its extra is installed)."""
    profile = base.with_profile(load_profile("minilm"))
    out: dict[str, Any] = {
        "plain cosine >= 0.85": None,
        "rules (profile band)": make_judge(profile.replace(judge="rules"), "minilm"),
        "calibrated (today)": make_judge(profile.replace(judge="calibrated"), "minilm"),
    }
    if pair_model.available():
        out["pair model"] = make_judge(profile.replace(judge="pair"), "minilm")
    return out


def decide(judge: Any, pairs: list[tuple[str, str, float]], bands: Any) -> tuple[np.ndarray, np.ndarray]:
    """(merged, flagged) per pair: a ``duplicate`` verdict; a contradiction recorded inside the bands."""
    if judge is None:
        return np.asarray([c >= 0.85 for _, _, c in pairs]), np.zeros(len(pairs), dtype=bool)
    merged = np.asarray(judge.merges(pairs))
    hits = judge.contradictions(pairs)
    flagged = np.asarray([h is not None and in_bands(c, bands) for h, (_, _, c) in zip(hits, pairs, strict=True)])
    return merged, flagged


def decisions(base: Settings) -> dict[str, Any]:
    """Each judge on the held-out public pairs (see the module doc); returns the figures it prints."""
    embedder = get_embedder(base)
    sets = {
        "msr": corpus.msr("msr-para-test.tsv"),
        "sick": [e for e in corpus.sick("SICK_test_annotated.txt", train=False) if e.label == 1],
    }
    scores, sa, sb = load(HELD_OUT_FILES)
    sts = [(a, b, float(s)) for s, a, b in zip(scores, sa, sb, strict=True) if a.strip() and b.strip()]
    vec = embed_cached(embedder, sorted({x for es in sets.values() for e in es for x in (e.a, e.b)}), CACHE)
    vec.update(embed_cached(embedder, sorted({x for a, b, _ in sts for x in (a, b)}), CACHE))

    def with_cos(pairs: list[tuple[str, str]]) -> list[tuple[str, str, float]]:
        return [(a, b, float(vec[a] @ vec[b])) for a, b in pairs]

    msr = with_cos([(e.a, e.b) for e in sets["msr"]])
    msr_same = np.asarray([e.label == 0 for e in sets["msr"]])
    sick = with_cos([(e.a, e.b) for e in sets["sick"]])
    sts_pairs, sts_good = with_cos([(a, b) for a, b, _ in sts]), np.asarray([s >= MERGE_OK for _, _, s in sts])
    bands = contradiction_bands(base.with_profile(load_profile("minilm")))
    print(
        f"\ndecisions on held-out pairs: MSR test {len(msr)} ({int(msr_same.sum())} paraphrases), SICK test "
        f"contradictions {len(sick)}, STS 2016 {len(sts_pairs)} ({int(sts_good.sum())} score >= {MERGE_OK})"
    )
    print(f"  {'judge':<22} {'MSR prec.':>9} {'recall':>7} {'SICK merged':>11} {'flagged':>8} {'STS prec.':>9}"
          f" {'recall':>7} {'ms/pair':>8}")  # fmt: skip
    out: dict[str, Any] = {}
    for name, judge in judges(base).items():
        t0 = time.perf_counter()
        merged, _ = decide(judge, msr, bands)
        took = (time.perf_counter() - t0) / len(msr) * 1000
        sick_merged, sick_flagged = decide(judge, sick, bands)
        sts_merged, _ = decide(judge, sts_pairs, bands)
        row = {
            "msr_precision": float((merged & msr_same).sum() / max(1, merged.sum())),
            "msr_recall": float((merged & msr_same).sum() / msr_same.sum()),
            "sick_merged": float(sick_merged.mean()),
            "sick_flagged": float(sick_flagged.mean()),
            "sts_precision": float((sts_merged & sts_good).sum() / max(1, sts_merged.sum())),
            "sts_recall": float((sts_merged & sts_good).sum() / sts_good.sum()),
            "ms_per_pair": took,
        }
        out[name] = row
        print(f"  {name:<22} {row['msr_precision']:>9.3f} {row['msr_recall']:>7.3f} {row['sick_merged']:>11.1%}"
              f" {row['sick_flagged']:>8.1%} {row['sts_precision']:>9.3f} {row['sts_recall']:>7.3f}"
              f" {took:>8.2f}")  # fmt: skip
    return out


def scenario(base: Settings) -> dict[str, Any]:
    """The 22 rewordings writes through import, plan, apply and the contradiction pass, per judge."""
    print(f"\nrewordings scenario: {len(REWORDING_WRITES)} writes ({len(REWORDED_FACTS)} facts)")
    out: dict[str, Any] = {}
    for name in ("rules", "calibrated", "pair"):
        if name == "pair" and not pair_model.available():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            store = MemoryStore.open(tmp, settings=base.replace(judge=name))
            import_jsonl(store, [json.dumps({"agent_id": "a", "content": w}) for w in REWORDING_WRITES])
            plan = consolidate_corpus(store, "a")
            if plan.plan_id:
                apply_corpus_merge(store, "a", plan.plan_id)
            detect_contradictions(store, "a")
            rows = store.engine.scan("a", columns=["content", "status", "superseded_by"]).to_pylist()
            visible = [r for r in rows if r["status"] not in ("superseded", "archived") and r["superseded_by"] is None]
            swap = [r for r in visible if r["content"] == VALUE_SWAP]
            berlin = [r for r in visible if "Berlin" in r["content"]]
            flagged = (
                bool(swap)
                and swap[0]["status"] == "contradicted"
                and any(r["status"] == "contradicted" for r in berlin)
            )
            out[name] = {"visible": len(visible), "swap_visible_and_flagged": flagged}
            print(f"  {store_judge_name(store):<32} visible {len(visible):>3}; swap and Berlin visible and flagged: "
                  f"{'yes' if flagged else 'no'}")  # fmt: skip
    return out


def store_judge_name(store: MemoryStore) -> str:
    return get_judge(store).name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=400, help="labelled held-out pairs (0 = all)")
    parser.add_argument("--band", type=float, default=0.85, help="merge threshold of the plain band to compare")
    parser.add_argument("--only", choices=("decisions", "scenario", "plan"), help="run one part")
    args = parser.parse_args()
    results = Results("merge_quality", args)

    base = Settings.from_env({"ENGRAM_EMBEDDER": "minilm"})
    if args.only in (None, "decisions"):
        for name, figures in decisions(base).items():
            results.add("decisions", judge=name, **figures)
    if args.only in (None, "scenario"):
        for name, figures in scenario(base).items():
            results.add("scenario", judge=name, **figures)
    if args.only not in (None, "plan"):
        results.save()
        return
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(tmp, settings=base)
        profile = store.settings
        scores, a, b = load(HELD_OUT_FILES)
        keep = [i for i in range(len(scores)) if a[i].strip() and b[i].strip()]
        if args.limit:
            keep = [keep[i] for i in np.random.default_rng(0).permutation(len(keep))[: args.limit]]
        a, b, scores = [a[i] for i in keep], [b[i] for i in keep], [float(scores[i]) for i in keep]
        started = time.perf_counter()
        ids = insert(store, "sts", a + b)
        labels: dict[frozenset[str], float] = {}
        for x, y, s in zip(a, b, scores, strict=True):
            if ids[x] != ids[y]:
                key = frozenset((ids[x], ids[y]))
                labels[key] = max(s, labels.get(key, s))
        left, right, _ = contradiction_set(sorted(set(a + b)))
        cids = insert(store, "contra", left + right)
        # In the contra agent, the STS pairs both of whose sentences are there keep their labels.
        contra = {
            frozenset((cids[x], cids[y])): s for x, y, s in zip(a, b, scores, strict=True) if x in cids and y in cids
        }
        contradicting = [frozenset((cids[x], cids[y])) for x, y in zip(left, right, strict=True) if cids[x] != cids[y]]
        contra.update({p: 0.0 for p in contradicting})
        inserted = time.perf_counter() - started
        print(f"embedded and inserted {len(ids) + len(cids)} sentences in {inserted:.1f}s")
        good = sum(1 for s in labels.values() if s >= MERGE_OK)
        good_pairs = [p for p, s in labels.items() if s >= MERGE_OK]
        print(
            f"sts: {len(labels)} labelled pairs ({good} with score >= {MERGE_OK}); contra: {len(contradicting)} pairs"
        )
        results.add(
            "corpus",
            sentences=len(ids) + len(cids),
            insert_s=inserted,
            sts_labelled_pairs=len(labels),
            sts_good_pairs=good,
            contra_pairs=len(contradicting),
        )

        bands = {
            f"band {args.band:.3f}-0.999 (issue)": (args.band, 0.999),
            f"profile {profile.merge_threshold:.3f}-{profile.duplicate_threshold:.3f}": (
                profile.merge_threshold,
                profile.duplicate_threshold,
            ),
        }
        for name, (lo, hi) in bands.items():
            settings = base.replace(merge_threshold=lo, duplicate_threshold=hi, contradiction_threshold_max=1.0)
            store.engine.settings = settings.with_profile({})  # explicit thresholds win over the profile
            print(f"\n{name}")
            print(f"  {'plan':<9} {'set':<7} {'merges':>7} {'right':>6} {'wrong':>6} {'unlab.':>6} {'precision':>9}"
                  f" {'pairs joined':>13}")  # fmt: skip
            for agent, lab in (("sts", labels), ("contra", contra)):
                graph = agent_graph(store, agent, floor=lo)
                t0 = time.perf_counter()
                report = consolidate_corpus(store, agent, graph=graph)
                took = time.perf_counter() - t0
                for plan_name, merges in (("plain", plain_plan(store, agent, graph, lo, hi)),
                                          ("guarded", guarded_plan(report))):  # fmt: skip
                    ok, bad, other = judge(merges, lab)
                    together = joined(merges, contradicting if agent == "contra" else good_pairs)
                    base_n = len(contradicting) if agent == "contra" else good
                    precision = f"{ok / (ok + bad):.3f}" if ok + bad else "-"
                    print(f"  {plan_name:<9} {agent:<7} {len(merges):>7} {ok:>6} {bad:>6} {other:>6} {precision:>9}"
                          f" {together / max(1, base_n):>12.1%}")  # fmt: skip
                    results.add(
                        "plans",
                        band=name,
                        plan=plan_name,
                        set=agent,
                        merges=len(merges),
                        right=ok,
                        wrong=bad,
                        unlabelled=other,
                        precision=ok / (ok + bad) if ok + bad else None,
                        pairs_joined=together / max(1, base_n),
                    )
                print(f"  (plan of {report.scanned} rows: {took:.2f}s)")
                results.add("plan_time", band=name, set=agent, rows=report.scanned, seconds=took)
        # End to end: apply the guarded plan at the profile band on the sts agent.
        store.engine.settings = profile
        plan = consolidate_corpus(store, "sts")
        t0 = time.perf_counter()
        applied = apply_corpus_merge(store, "sts", plan.plan_id)
        took = time.perf_counter() - t0
        print(f"\napply (profile band, sts): {applied.merged} merged in {applied.clusters} clusters, "
              f"{applied.skipped_concurrent_edit} skipped, {took:.2f}s")  # fmt: skip
        results.add(
            "apply",
            merged=applied.merged,
            clusters=applied.clusters,
            skipped_concurrent_edit=applied.skipped_concurrent_edit,
            seconds=took,
        )
    results.save()


if __name__ == "__main__":
    main()
