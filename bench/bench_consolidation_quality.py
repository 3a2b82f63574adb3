"""Beliefs and procedures derived from real-looking episodes: precision and recall against labels, and time.

    python bench/bench_consolidation_quality.py                     # hashing, 10k episodes for the timing
    python bench/bench_consolidation_quality.py --embedder minilm   # the same with MiniLM clusters
    python bench/bench_consolidation_quality.py --only sessions     # the labelled multi-session dialogues only

Multi-session dialogue (issue 34): the labelled corpus ``bench/data/sessions/labelled.jsonl``
(:mod:`tests.corpora.sessions`: three two-person conversations of 16 sessions), imported turn by turn
with the write path's checks, then the contradiction pass and a ``full`` consolidation per conversation. Per
conversation: the largest episode cluster's share of the stored turns, derived beliefs that say a labelled fact
about their speaker (precision) and labelled facts said in two or more sessions that became a belief
(coverage), labelled routines that became a procedure (and why a stage derived nothing, as its report says),
turns flagged against a turn they do not contradict (false flags) and labelled changes flagged,
evidence recall@10 of a question per fact before and after the passes (also counting a belief with the turns
it was derived from: :func:`tests.corpora.sessions.provenance_recall`), and the CPU time of the passes at three
sizes (32, 128 and 256 sessions per conversation, generated the same way; :func:`timing`), per stored turn
against the smallest size. The judge of the contradiction pass is named.

Quality: the hand-written conversations and tool logs of ``tests/corpora/conversations.py`` (three agents,
several speakers, reported speech, hedges, changes of mind, small talk, logged fixes), imported as episodes,
consolidated with ``scope=full``; derived beliefs and procedures are matched against what a careful reader
concludes (``BELIEFS``, ``PROCEDURES``).

Time: the same corpus copied under new agent ids until it holds ``--episodes`` episodes, consolidated agent
by agent; the reference measured in the same run is the claim extraction alone over the same texts (the
lexical parser, ``Extractor.extract_claims``), so the ratio says what the stages around it cost.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from results import Results  # noqa: E402

from engram_pipeline.importer import import_jsonl  # noqa: E402
from engram_pipeline.lifecycle.consolidation import consolidate  # noqa: E402
from engram_pipeline.lifecycle.contradictions import detect_contradictions  # noqa: E402
from engram_pipeline.lifecycle.episodes import cluster_episodes  # noqa: E402
from engram_pipeline.lifecycle.extractors import default_extractor  # noqa: E402
from engram_pipeline.settings import Settings  # noqa: E402
from engram_pipeline.store import MemoryStore  # noqa: E402
from tests.corpora import conversations as cv  # noqa: E402
from tests.corpora import sessions as sc  # noqa: E402
from tests.corpora.dialogues import evidence_recall  # noqa: E402


def derived(store: MemoryStore, agent: str, kind: str) -> list[dict]:
    return [r for r in store.list_memories(agent, kind=kind) if r["source"] == "derived"]


SESSIONS = ROOT / "bench" / "data" / "sessions" / "labelled.jsonl"
SIZES = (32, 128, 256)  # sessions per conversation for the timing (the labelled corpus has 16)


def sessions(settings: Settings, root: Path, results: Results, *, repeats: int = 3) -> None:
    """The figures of issue 34 on the labelled multi-session dialogues (see the module docstring)."""
    records = sc.load(SESSIONS)
    store = MemoryStore.open(str(root / "sessions"), settings=settings)
    import_jsonl(store, sc.import_lines(records))  # the write path's checks, as an agent's turns arrive
    questions = sc.questions(records)
    now = max(datetime.fromisoformat(r["created_at"]) for r in records if r["type"] == "turn") + timedelta(days=1)
    before = evidence_recall(store, questions, now=now, ks=(10,))[10]
    before_p = sc.provenance_recall(store, questions, now=now)
    convs = sorted({r["conversation"] for r in records})
    print(f"multi-session dialogue ({settings.embedder}; {SESSIONS.relative_to(ROOT)}):")
    print(
        "  conversation | turns stored | largest cluster | beliefs matched/derived | recurring facts covered"
        " | false flags | changes flagged | procedures, schemas"
    )
    totals: dict[str, Any] = {"b": sc.BeliefFigures(0, 0, 0, 0), "c": sc.ContradictionFigures(0, 0, 0, 0)}
    totals |= {"share": 0.0, "routines": 0, "routines_covered": 0}
    judge = ""
    for conv in convs:
        judge = detect_contradictions(store, conv, now=now).judge
        report = consolidate(store, conv, scope="full", now=now)
        episodes = store.list_memories(conv, kind="episodic")
        share = sc.largest_cluster_share(cluster_episodes(store, conv, scope="full", now=now).clusters, len(episodes))
        beliefs = [r for r in store.list_memories(conv, kind="semantic") if r["source"] == "derived"]
        b = sc.belief_figures(beliefs, [r for r in records if r["type"] == "fact" and r["conversation"] == conv])
        c = sc.contradiction_figures(
            episodes, [r for r in records if r["type"] == "change" and r["conversation"] == conv]
        )
        routines = [r for r in records if r["type"] == "routine" and r["conversation"] == conv]
        covered = sc.routines_covered(derived(store, conv, "procedural"), routines)
        totals["routines"] += len(routines)
        totals["routines_covered"] += covered
        print(
            f"  {conv:>12} | {len(episodes)} | {share:.3f} | {b.matched}/{b.derived} | {b.covered}/{b.recurring}"
            f" | {c.falsely_flagged} ({c.false_rate:.3f}) | {c.changes_flagged}/{c.changes}"
            f" | procedures {report.procedures_created} ({covered} of {len(routines)} routines), schemas"
            f" {report.schemas_created}"
        )
        results.add(
            "sessions_conversations",
            conversation=conv,
            turns_stored=len(episodes),
            largest_cluster_share=share,
            beliefs_matched=b.matched,
            beliefs_derived=b.derived,
            recurring_facts_covered=b.covered,
            recurring_facts=b.recurring,
            false_flags=c.falsely_flagged,
            false_flag_rate=c.false_rate,
            changes_flagged=c.changes_flagged,
            changes=c.changes,
            procedures=report.procedures_created,
            routines_covered=covered,
            routines=len(routines),
            schemas=report.schemas_created,
        )
        for stage, why in sorted(report.none_qualified.items()):  # what the pass says when nothing qualified
            print(f"  {'':>12}   no {stage}: {why}")
        tb, tc = totals["b"], totals["c"]
        totals["b"] = sc.BeliefFigures(
            *(x + y for x, y in zip(dataclasses.astuple(tb), dataclasses.astuple(b), strict=True))
        )
        totals["c"] = sc.ContradictionFigures(
            *(x + y for x, y in zip(dataclasses.astuple(tc), dataclasses.astuple(c), strict=True))
        )
        totals["share"] = max(totals["share"], share)
    after = evidence_recall(store, questions, now=now, ks=(10,))[10]
    after_p = sc.provenance_recall(store, questions, now=now)
    b, c = totals["b"], totals["c"]
    print(f"  largest cluster: {totals['share']:.3f} of a conversation's stored turns at most (goal <= 0.25)")
    print(f"  routines that became a procedure: {totals['routines_covered']} of {totals['routines']}")
    print(
        f"  beliefs (same belief: same parsed slot and claims.same_value, not the pair judge): precision"
        f" {b.precision:.3f} ({b.matched} of {b.derived}; goal >= 0.80), coverage {b.coverage:.3f} ({b.covered}"
        f" of {b.recurring} recurring facts; goal >= 0.50)"
    )
    print(
        f"  contradictions (judge {judge}): false flags {c.false_rate:.4f} of turns ({c.falsely_flagged} of {c.turns};"
        f" goal <= 0.01), labelled changes flagged {c.changes_flagged} of {c.changes}"
    )
    print(
        f"  evidence recall@10: before {before:.3f}, after {after:.3f} (ratio {after / before if before else 0:.3f};"
        " goal >= 0.95)"
    )
    print(
        f"  the same, a belief counting with the turns it was derived from: before {before_p:.3f}, after {after_p:.3f}"
        f" (ratio {after_p / before_p if before_p else 0:.3f})"
    )
    results.add(
        "sessions",
        largest_cluster_share=totals["share"],
        routines_covered=totals["routines_covered"],
        routines=totals["routines"],
        belief_precision=b.precision,
        beliefs_matched=b.matched,
        beliefs_derived=b.derived,
        belief_coverage=b.coverage,
        recurring_facts_covered=b.covered,
        recurring_facts=b.recurring,
        judge=judge,
        false_flag_rate=c.false_rate,
        false_flags=c.falsely_flagged,
        turns=c.turns,
        changes_flagged=c.changes_flagged,
        changes=c.changes,
        recall_at_10_before=before,
        recall_at_10_after=after,
        recall_at_10_ratio=after / before if before else 0,
        provenance_recall_before=before_p,
        provenance_recall_after=after_p,
        provenance_recall_ratio=after_p / before_p if before_p else 0,
    )
    timing(settings, root, convs, now, results, repeats=repeats)


def cold_caches() -> None:
    """Empty the library's caches of results by text (parsed claims, slots), so a repeat reads its texts anew."""
    for name, module in list(sys.modules.items()):
        if name.startswith("engram_pipeline"):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info"):
                    value.cache_clear()


def timing(settings: Settings, root: Path, convs: list[str], now: datetime, results: Results, *, repeats: int) -> None:
    """CPU seconds (``time.process_time``, lancedb's threads included) of the passes at :data:`SIZES`, the median
    of ``repeats`` runs, each on a fresh copy of the imported store with cold caches (:func:`cold_caches`); the
    cost per stored turn as a ratio to the smallest size says whether a pass is linear in turns (x1.00) or not.

    The generator's small talk comes from a small pool of sentences, so a longer conversation says the same
    sentences again, and the write path keeps one copy of each (exact dedup): 4x the sessions stored 2x the
    turns. Each turn is therefore given a ``(turn N)`` prefix, which the readers drop, so every generated turn
    is stored and the sizes are what they say; the same sentence said again is what a longer conversation adds.
    """
    per_turn: dict[str, float] = {}
    for n_sessions in SIZES:
        lines = sc.import_lines(sc.generate(sessions=n_sessions))
        lines = [{**line, "content": f"(turn {k}) {line['content']}"} for k, line in enumerate(lines)]
        base = root / f"sessions-{n_sessions}"
        turns = import_jsonl(MemoryStore.open(str(base), settings=settings), lines, checks="exact").created
        later = now + timedelta(days=4 * n_sessions)
        cpu: dict[str, list[float]] = {"clustering": [], "contradiction pass": [], "consolidation": []}
        candidates = 0
        for r in range(repeats):
            shutil.copytree(base, root / f"copy-{n_sessions}-{r}")
            timed = MemoryStore.open(str(root / f"copy-{n_sessions}-{r}"), settings=settings)
            cold_caches()
            spent = dict.fromkeys(cpu, 0.0)
            for conv in convs:
                t0 = time.process_time()
                cluster_episodes(timed, conv, scope="full", now=later)
                t1 = time.process_time()
                found = detect_contradictions(timed, conv, now=later).candidates
                t2 = time.process_time()
                consolidate(timed, conv, scope="full", now=later)
                t3 = time.process_time()
                spent["clustering"] += t1 - t0
                spent["contradiction pass"] += t2 - t1
                spent["consolidation"] += t3 - t2
                candidates += found if r == 0 else 0
            for stage, took in spent.items():
                cpu[stage].append(took)
        parts = []
        figures: dict[str, float] = {}
        for stage, runs in cpu.items():
            median = statistics.median(runs)
            cost = median / turns
            ratio = cost / per_turn.setdefault(stage, cost)
            parts.append(f"{stage} {median:.2f} CPU-s ({cost * 1000:.3f} ms per turn, x{ratio:.2f})")
            key = stage.replace(" ", "_")
            figures |= {f"{key}_cpu_s": median, f"{key}_ms_per_turn": cost * 1000, f"{key}_x_smallest": ratio}
        print(
            f"  CPU, {n_sessions} sessions per conversation ({turns} turns stored, {candidates} contradiction"
            f" candidate pairs), median of {repeats}: " + "; ".join(parts)
        )
        results.add(
            "sessions_cpu",
            sessions_per_conversation=n_sessions,
            turns_stored=turns,
            contradiction_candidate_pairs=candidates,
            repeats=repeats,
            **figures,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    ap.add_argument("--episodes", type=int, default=10_000, help="corpus size for the timing")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=["all", "sessions"], default="all", help="sessions: the dialogue figures only")
    args = ap.parse_args()
    results = Results("consolidation_quality", args)
    settings = Settings.from_env({"ENGRAM_EMBEDDER": args.embedder})
    root = Path(tempfile.mkdtemp(prefix="consolidation-quality-"))
    try:
        sessions(settings, root, results, repeats=args.repeats)
        if args.only == "sessions":
            results.save()
            return 0
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
            results.add(
                "quality_agents",
                agent=agent,
                **{f"{kind}_{what}": n for kind, row in (("beliefs", b), ("procedures", p))
                   for what, n in zip(("tp", "derived", "labelled"), row, strict=True)},
            )  # fmt: skip
        for name, (tp, found, labelled) in (("beliefs", totals["b"]), ("procedures", totals["p"])):
            precision = tp / found if found else float("nan")
            print(f"  {name}: precision {precision:.3f}, recall {tp / labelled:.3f} ({tp} of {labelled} labels)")
            results.add(
                "quality", kind=name, precision=precision, recall=tp / labelled, tp=tp, derived=found, labelled=labelled
            )

        per_copy = sum(len(v) for v in cv.EPISODES.values())
        copies = max(1, args.episodes // per_copy)
        lines = [line for c in range(copies) for line in cv.import_lines(suffix=f"-{c:05d}")]
        agents = sorted({line["agent_id"] for line in lines})
        texts = [line["content"] for line in lines]
        extractor = default_extractor()
        parse_s, run_s = [], []
        for r in range(args.repeats):
            # The corpus is copies of the same episodes, and the parser caches by text: each copy is parsed
            # with cold caches, so the reference is what parsing every text costs, not one copy's worth.
            parsed = 0.0
            for c in range(copies):
                cold_caches()
                t = time.perf_counter()
                extractor.extract_claims(texts[c * per_copy : (c + 1) * per_copy])
                parsed += time.perf_counter() - t
            parse_s.append(parsed)
            big = MemoryStore.open(str(root / f"timing-{r}"), settings=settings)
            import_jsonl(big, lines)
            cold_caches()
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
        results.add(
            "time",
            episodes=len(lines),
            agents=len(agents),
            repeats=args.repeats,
            consolidate_s_per_10k=run * scale,
            claim_extraction_s_per_10k=parse * scale,
            consolidation_over_parser=run / parse,
            episodes_per_agent=per_copy / len(cv.EPISODES),
            ms_per_agent=run / len(agents) * 1000,
        )
        results.save()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
