"""Beliefs and procedures derived from real-looking episodes: precision and recall against labels, and time.

    python bench/bench_consolidation_quality.py                     # hashing, 10k episodes for the timing
    python bench/bench_consolidation_quality.py --embedder minilm   # the same with MiniLM clusters

Quality: the hand-written conversations and tool logs of ``engram_pipeline/conversations.py`` (three agents,
several speakers, reported speech, hedges, changes of mind, small talk, logged fixes), imported as episodes,
consolidated with ``scope=full``; derived beliefs and procedures are matched against what a careful reader
concludes (``BELIEFS``, ``PROCEDURES``).

Time: the same corpus copied under new agent ids until it holds ``--episodes`` episodes, consolidated agent
by agent; the reference measured in the same run is the claim extraction alone over the same texts (the
lexical parser, ``Extractor.extract_claims``), so the ratio says what the stages around it cost.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from engram_pipeline import conversations as cv  # noqa: E402
from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.lifecycle.consolidation import consolidate  # noqa: E402
from engram_pipeline.lifecycle.extractors import default_extractor  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402


def derived(store: MemoryStore, agent: str, kind: str) -> list[dict]:
    return [r for r in store.list_memories(agent, kind=kind) if r["source"] == "derived"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    ap.add_argument("--episodes", type=int, default=10_000, help="corpus size for the timing")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    settings = Settings.from_env({"ENGRAM_EMBEDDER": args.embedder})
    root = Path(tempfile.mkdtemp(prefix="consolidation-quality-"))
    try:
        store = MemoryStore.open(str(root / "quality"), settings=settings)
        import_jsonl(store, cv.import_lines(), checks="exact")  # the episodes as given, as the reference was measured
        print(f"quality ({args.embedder}): agent | beliefs tp/derived/labelled | procedures tp/derived/labelled")
        totals = {"b": [0, 0, 0], "p": [0, 0, 0]}
        for agent in cv.EPISODES:
            consolidate(store, agent, scope="full")
            b = cv.score(derived(store, agent, "semantic"), cv.BELIEFS[agent], cv.belief_match)
            p = cv.score(derived(store, agent, "procedural"), cv.PROCEDURES[agent], cv.procedure_match)
            totals["b"] = [t + c for t, c in zip(totals["b"], b, strict=True)]
            totals["p"] = [t + c for t, c in zip(totals["p"], p, strict=True)]
            print(f"  {agent:>5} | {b[0]}/{b[1]}/{b[2]} | {p[0]}/{p[1]}/{p[2]}")
        for name, (tp, found, labelled) in (("beliefs", totals["b"]), ("procedures", totals["p"])):
            precision = tp / found if found else float("nan")
            print(f"  {name}: precision {precision:.3f}, recall {tp / labelled:.3f} ({tp} of {labelled} labels)")

        per_copy = sum(len(v) for v in cv.EPISODES.values())
        copies = max(1, args.episodes // per_copy)
        lines = [line for c in range(copies) for line in cv.import_lines(suffix=f"-{c:05d}")]
        agents = sorted({line["agent_id"] for line in lines})
        texts = [line["content"] for line in lines]
        extractor = default_extractor()
        parse_s, run_s = [], []
        for r in range(args.repeats):
            t = time.perf_counter()
            extractor.extract_claims(texts)
            parse_s.append(time.perf_counter() - t)
            big = MemoryStore.open(str(root / f"timing-{r}"), settings=settings)
            import_jsonl(big, lines)
            t = time.perf_counter()
            for agent in agents:
                consolidate(big, agent, scope="full")
            run_s.append(time.perf_counter() - t)
        scale = 10_000 / len(lines)
        run, parse = statistics.median(run_s), statistics.median(parse_s)
        print(
            f"\ntime ({len(lines)} episodes over {len(agents)} agents, median of {args.repeats}): consolidate "
            f"{run * scale:.1f} s per 10k episodes; claim extraction alone {parse * scale:.2f} s per 10k "
            f"(consolidation {run / parse:.0f}x the parser)"
        )
        print(f"  per agent ({per_copy / len(cv.EPISODES):.0f} episodes on average): {run / len(agents) * 1000:.0f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
