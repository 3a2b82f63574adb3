"""Batch contradiction pass: flag (or supersede) the similar pairs of one agent that contradict each other.

The write path catches a contradiction when the second memory arrives; this pass catches the rest (rows
imported in bulk, thresholds or rules changed since, a neighbour the write path's k nearest missed).

Candidates are the pairs of the agent's neighbour graph (:mod:`engram_pipeline.lifecycle.graph`) with
``MEMORY_CONTRADICTION_THRESHOLD <= score < MEMORY_CONTRADICTION_THRESHOLD_MAX`` (or at or above
``MEMORY_DUPLICATE_THRESHOLD``: near-identical rows that a veto kept apart) between two rows recall shows, and
among the :data:`~engram_pipeline.lifecycle.graph.CANDIDATES_PER_ROW` nearest pairs (from the lowest of those
bands up) of either of the two rows, so that the pairs judged grow linearly with the rows: a long conversation
that keeps saying the same things has in-band pairs that grow with the square of its turns. A pass given no
graph computes only those pairs (:func:`~engram_pipeline.similarity.nearest_graph`), ranking a row's
neighbours among the visible rows and the rows a contradiction hid (``supersede``, here or at write time), so
that a row this pass hides never lets a new pair into the cap: a second run has nothing new to judge. (A
precomputed graph holds the visible rows only: there, a pair a hidden row kept out of the cap can become a
candidate on a later run.) A change of value said among many turns that are closer to both of its sides than
they are to each other can be missed; ``docs/consolidation.md`` measures how often on the labelled dialogues.
A candidate is confirmed by the store's judge (:func:`engram_pipeline.judge.contradictions_of`): the lexical rules
of :func:`engram_pipeline.claims.detect_contradiction`, and with the pair model its contradiction verdicts between
two rows of one kind that are not episodes (similarity only says two memories talk about the same thing, not
that they disagree). Then, by policy:

* ``flag`` (default): both rows ``contradicted``, each in the other's ``contradiction_with``, reason and time
  in their metadata, one ``contradicts`` link (newer -> older). Both stay in recall.
* ``supersede``: the older row (``created_at``, then id) is hidden behind the newer (``superseded_by``), its
  pre-image audited so ``restore`` brings it back, and a ``supersedes`` link (newer -> older).

Writes go through one compare-and-set per batch of candidate pairs (batched by the smaller id of each pair,
which is also the resumable cursor), claiming the versions the pass read: a row edited since is re-read once
and marked only if its content is still the one judged, else counted in ``skipped_concurrent_edit``. A pair
already flagged both ways is not a candidate again, so a second run changes nothing (it only writes the
``contradicts`` link of a flagged pair that has none: a run killed between the two commits left it out). A
resumed run counts the pairs its killed attempt flagged after the last recorded batch, and reports the whole
run.

A sweep (:func:`contradiction_sweep`) judges the pairs of a set of agents of one shard in one run: one read of
their rows, each agent's neighbour graph computed on its own rows inside the sweep (a pair never spans two
agents), batches of anchors spanning agents, one cursor per shard; each agent's report is its share.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from engram_pipeline.claims import Contradiction
from engram_pipeline.judge import contradictions_of, get_judge
from engram_pipeline.lifecycle._batched import BatchResult, Recount, count_frames, run_batched
from engram_pipeline.lifecycle._common import PassCursor, agent_frame, sweep_key
from engram_pipeline.lifecycle.graph import CANDIDATES_PER_ROW, VISIBLE_SQL, agent_graph
from engram_pipeline.model import Memory
from engram_pipeline.settings import CONTRADICTION_POLICIES, Settings, SettingsError
from engram_pipeline.similarity import nearest_per_row
from engram_pipeline.similarity.bands import contradiction_bands, filter_bands
from engram_pipeline.store.marks import mark_contradicted_many, mark_superseded_many

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

PASS_NAME = "contradictions"
ACTOR = "contradiction_detection"
BATCH_SIZE = 1000  # anchor rows (the smaller id of a pair) per compare-and-set batch
COUNTS = ("candidates", "flagged", "superseded", "skipped_concurrent_edit")
# The rows a row's nearest are ranked among (see the module doc): visible, or hidden by a contradiction (a
# ``superseded`` entry in the metadata; the corpus merge's members carry ``merged``, the archive none).
_RANKED_SQL = f"({VISIBLE_SQL}) OR (superseded_by IS NOT NULL AND metadata LIKE '%\"superseded\": {{%')"
_COLUMNS = [
    "id", "agent_id", "kind", "content", "content_hash", "status", "superseded_by", "contradiction_with",
    "created_at", "version",
]  # fmt: skip


@dataclass(frozen=True)
class ContradictionReport:
    """What one run did. ``flagged`` counts pairs newly flagged, ``superseded`` rows hidden (policy
    ``supersede``); ``candidates`` the in-band pairs the rules judged (pairs already flagged are not)."""

    scanned: int
    candidates: int
    flagged: int
    superseded: int
    skipped_concurrent_edit: int
    cursor: dict[str, Any]
    judge: str = ""  # the judge that confirmed the candidates (engram_pipeline/judge/)


def detect_contradictions(
    store: MemoryStore,
    agent_id: str,
    *,
    graph: pa.Table | None = None,
    now: datetime | None = None,
    run_id: str | None = None,
    policy: str | None = None,
    batch_size: int = BATCH_SIZE,
) -> ContradictionReport:
    """Flag or supersede the contradicting pairs of ``agent_id``'s similar memories; see the module doc.

    ``graph`` is the agent's precomputed neighbour graph (any floor at or below the contradiction band);
    ``policy`` overrides ``MEMORY_CONTRADICTION_POLICY``. The sweep of one agent.
    """
    reports = contradiction_sweep(
        store, [agent_id], graph=graph, now=now, run_id=run_id, policy=policy, batch_size=batch_size
    )
    return reports[agent_id]


def contradiction_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    graph: pa.Table | None = None,
    now: datetime | None = None,
    run_id: str | None = None,
    policy: str | None = None,
    batch_size: int = BATCH_SIZE,
) -> dict[str, ContradictionReport]:
    """:func:`detect_contradictions` over every agent of ``agent_ids`` (all of one shard) in one run; ``graph``,
    if given, holds the pairs of all of them."""
    settings = store.settings
    policy = policy or settings.contradiction_policy
    if policy not in CONTRADICTION_POLICIES:
        raise SettingsError(f"contradiction policy {policy!r}: must be one of {', '.join(CONTRADICTION_POLICIES)}")
    agents = sorted(set(agent_ids))
    if not agents:
        return {}
    key, scope = sweep_key(agents, settings.shards)
    cursor = PassCursor.deferred(store, PASS_NAME, key, now=now, run_id=run_id, scope=scope, agents=agents)
    rows: dict[str, Memory] = {}
    linked: set[frozenset[str]] = set()
    by_anchor: dict[str, list[tuple[str, str, float]]] = {}
    hits: dict[tuple[str, str], Contradiction | None] = {}
    read: dict[str, Any] = {"graph": graph}
    judge = get_judge(store)

    def work() -> pl.DataFrame:
        """The anchors with candidate pairs, and whether judging them would write (a confirmed contradiction,
        or a flagged pair whose link a killed run did not write)."""
        frame = agent_frame(store, agents, columns=_COLUMNS, where=VISIBLE_SQL)
        if read["graph"] is not None and not cursor.stale:
            graph = read["graph"]
        else:
            graph = agent_graph(
                store, agents, floor=_band_floor(settings), per_row=CANDIDATES_PER_ROW, rows=_RANKED_SQL
            )
        pairs = _ordered_pairs(_candidate_band(graph, settings))
        involved = set(pairs["a"].to_list()) | set(pairs["b"].to_list())
        rows.clear()
        rows.update({r["id"]: r for r in frame.filter(pl.col("id").is_in(list(involved))).to_dicts()})
        linked.clear()
        linked.update(_linked_pairs(store, agents))
        by_anchor.clear()
        for a, b, score in pairs.iter_rows():
            if a in rows and b in rows:  # both still visible
                by_anchor.setdefault(a, []).append((a, b, score))
        # every candidate judged at once (the pair model batches), before any batch writes
        judged = [p for x in sorted(by_anchor) for p in by_anchor[x] if not _flagged(rows[p[0]], rows[p[1]])]
        found = contradictions_of(
            judge,
            [(rows[a]["content"], rows[b]["content"], score) for a, b, score in judged],
            [(rows[a]["kind"], rows[b]["kind"]) for a, b, _ in judged],
        )
        hits.clear()
        hits.update({(a, b): hit for (a, b, _), hit in zip(judged, found, strict=True)})
        read.update(scanned=Counter(frame["agent_id"].to_list()), pairs=pairs)
        anchors = sorted(by_anchor)
        writes = [
            any(_would_write(rows[a], rows[b], linked, policy, hits) for a, b, _ in by_anchor[x]) for x in anchors
        ]
        return pl.DataFrame({"anchor": anchors, "writes": writes}, schema={"anchor": pl.String, "writes": pl.Boolean})

    hidden: set[str] = set()
    run = run_batched(
        cursor,
        work,
        lambda batch: _run_batch(
            store, [p for a in batch["anchor"] for p in by_anchor[a]], rows, hidden, linked, policy, cursor, hits
        ),
        writes=pl.col("writes"),
        size=batch_size,
        counts=COUNTS,
        key="anchor",
        recount=Recount(
            ["agent_id", "contradiction_with", "superseded_by", "metadata"],
            lambda before, after: _unrecorded_counts(before, after, pairs=read["pairs"], now=cursor.now, policy=policy),
        ),
        summary={"policy": policy},
    )
    return {
        agent: ContradictionReport(
            scanned=read["scanned"][agent], **run.agent_counts(agent, COUNTS), cursor=run.cursor, judge=judge.name
        )
        for agent in agents
    }


def _would_write(
    ra: Memory, rb: Memory, linked: set[frozenset[str]], policy: str, hits: dict[tuple[str, str], Contradiction | None]
) -> bool:
    """Whether :func:`_run_batch` would write for this candidate pair (as it decides, before any write)."""
    if _flagged(ra, rb):
        return policy == "flag" and frozenset((ra["id"], rb["id"])) not in linked
    return hits.get((ra["id"], rb["id"])) is not None


def _run_batch(
    store: MemoryStore,
    pairs: list[tuple[str, str, float]],
    rows: dict[str, Memory],
    hidden: set[str],
    linked: set[frozenset[str]],
    policy: str,
    cursor: PassCursor,
    hits: dict[tuple[str, str], Contradiction | None],
) -> BatchResult:
    """Judge one batch of candidate pairs and write its verdicts in one compare-and-set (plus one links add)."""
    confirmed: list[tuple[Memory, Memory, float, str]] = []  # (newer, older, score, reason)
    unlinked: list[tuple[Memory, Memory, float, str]] = []  # flagged both ways, but the link was never written
    candidates: list[str] = []  # the anchor of each judged pair
    for a, b, score in pairs:
        ra, rb = rows[a], rows[b]
        if a in hidden or b in hidden:
            continue
        newer, older = (ra, rb) if (ra["created_at"], a) > (rb["created_at"], b) else (rb, ra)
        if _flagged(ra, rb):
            # A run killed between its compare-and-set and its links commit left the pair flagged, unlinked.
            if policy == "flag" and frozenset((a, b)) not in linked:
                unlinked.append((newer, older, score, ""))
            continue
        candidates.append(a)
        hit = hits.get((a, b))
        if hit is not None:
            confirmed.append((newer, older, score, hit.reason))
    if not confirmed:
        _add_links(store, unlinked, "contradicts", linked, cursor)
        return _by_agent(rows, {"candidates": candidates})
    ids = {r["id"] for n, o, _, _ in confirmed for r in (n, o)}
    expected = {i: int(rows[i]["version"]) for i in ids}
    judged = {i: rows[i]["content_hash"] for i in ids}

    def still_valid(fresh: Memory) -> bool:
        return bool(fresh["content_hash"] == judged.get(fresh["id"]))

    common: dict[str, Any] = {
        "actor": ACTOR,
        "expected": expected,
        "still_valid": still_valid,
        "now": cursor.now,
        "run_id": cursor.run_id,
    }
    if policy == "supersede":
        # An older row contradicted by several newer ones is hidden behind the newest of them.
        confirmed.sort(key=lambda c: (c[0]["created_at"], c[0]["id"]), reverse=True)
        chosen: dict[str, str] = {}
        for n, o, _, _ in confirmed:
            chosen.setdefault(o["id"], n["id"])
        result = mark_superseded_many(store.engine, [(o["id"], n["id"], why) for n, o, _, why in confirmed], **common)
        done = set(result.applied)
        hidden.update(done)
        rel, written = "supersedes", [c for c in confirmed if c[1]["id"] in done and chosen[c[1]["id"]] == c[0]["id"]]
    else:
        result = mark_contradicted_many(
            store.engine, [(x["id"], y["id"], why) for n, o, _, why in confirmed for x, y in ((n, o), (o, n))], **common
        )
        done = set(result.applied) | set(result.unchanged)
        rel, written = "contradicts", [c for c in confirmed if c[0]["id"] in done and c[1]["id"] in done]
    _refresh(store, rows, result.applied)
    _add_links(store, [*written, *unlinked], rel, linked, cursor)
    return _by_agent(
        rows,
        {
            "candidates": candidates,
            "flagged": [n["id"] for n, _, _, _ in written] if policy == "flag" else [],
            "superseded": list(result.applied) if policy == "supersede" else [],
            "skipped_concurrent_edit": list(result.skipped_concurrent_edit),
        },
    )


def _by_agent(rows: dict[str, Memory], counted: dict[str, list[str]]) -> BatchResult:
    """Counts of the ids under each name, in all and per agent (the agent of each id's row)."""
    by_agent: dict[str, dict[str, int]] = {}
    for name, ids in counted.items():
        for i in ids:
            mine = by_agent.setdefault(rows[i]["agent_id"], {})
            mine[name] = mine.get(name, 0) + 1
    return BatchResult({name: len(ids) for name, ids in counted.items()}, by_agent=by_agent)


def _add_links(
    store: MemoryStore,
    pairs: list[tuple[Memory, Memory, float, str]],
    rel: str,
    linked: set[frozenset[str]],
    cursor: PassCursor,
) -> None:
    """One links commit for the ``(newer, older, score, _)`` pairs not linked yet (newer -> older)."""
    links = [
        {"agent_id": n["agent_id"], "src_id": n["id"], "dst_id": o["id"], "rel": rel, "score": round(score, 6)}
        for n, o, score, _ in pairs
        if frozenset((n["id"], o["id"])) not in linked
    ]
    store.engine.add_links(links, run_id=cursor.run_id)
    linked.update(frozenset((link["src_id"], link["dst_id"])) for link in links)


def _unrecorded_counts(
    before: pl.DataFrame, after: pl.DataFrame, *, pairs: pl.DataFrame, now: datetime, policy: str
) -> BatchResult:
    """What killed attempts of this run wrote after its last recorded batch (see ``PassCursor.unrecorded``),
    so that the resumed run reports the whole run: under ``flag``, candidate pairs it flagged both ways (a
    flagged pair is no candidate again); under ``supersede``, rows it hid (stamped with the run's ``now``)."""
    if policy == "supersede":
        stamped = pl.col("metadata").str.json_path_match("$.superseded.at") == now.isoformat()
        was_visible = before.filter(pl.col("superseded_by").is_null())["id"].to_list()
        hid = after.filter(pl.col("id").is_in(was_visible) & pl.col("superseded_by").is_not_null() & stamped)
        return count_frames({"superseded": hid, "candidates": hid})
    then = dict(zip(before["id"].to_list(), before["contradiction_with"].to_list(), strict=True))
    now_ = dict(zip(after["id"].to_list(), after["contradiction_with"].to_list(), strict=True))

    def flagged(cw: dict[str, list[str] | None], a: str, b: str) -> bool:
        return b in (cw.get(a) or []) and a in (cw.get(b) or [])

    agent_of = dict(zip(before["id"].to_list(), before["agent_id"].to_list(), strict=True))
    found = pl.DataFrame(  # one row per pair flagged (its agent), not per anchor
        {
            "agent_id": [
                agent_of[a]
                for a, b in zip(pairs["a"].to_list(), pairs["b"].to_list(), strict=True)
                if a in then and b in then and not flagged(then, a, b) and flagged(now_, a, b)
            ]
        },
        schema={"agent_id": pl.String},
    )
    return count_frames({"candidates": found, "flagged": found})


def _band_floor(settings: Settings) -> float:
    return min(lo for lo, _ in contradiction_bands(settings))


def _candidate_band(graph: pa.Table, settings: Settings) -> pa.Table:
    """Pairs in ``[contradiction_threshold, contradiction_threshold_max)``, plus the pairs at or above the
    duplicate threshold (they are still visible side by side only because a veto kept them apart, and a
    contradiction there must be recorded like any other), among the :data:`CANDIDATES_PER_ROW` nearest pairs of
    either row from the lowest band up (a graph computed with ``per_row`` has those already: cutting it again
    keeps them)."""
    above = filter_bands(graph, ((_band_floor(settings), None),))
    return filter_bands(nearest_per_row(above, CANDIDATES_PER_ROW), contradiction_bands(settings))


def _ordered_pairs(pairs: pa.Table) -> pl.DataFrame:
    """Pairs as ``(a, b, score)`` with ``a < b``, so each unordered pair has one anchor (``a``)."""
    df = pl.from_arrow(pairs)
    assert isinstance(df, pl.DataFrame)
    return df.select(
        pl.min_horizontal("src_id", "dst_id").alias("a"),
        pl.max_horizontal("src_id", "dst_id").alias("b"),
        pl.col("score").cast(pl.Float64),
    ).unique(subset=["a", "b"], keep="first", maintain_order=True)


def _flagged(a: Memory, b: Memory) -> bool:
    return b["id"] in (a["contradiction_with"] or []) and a["id"] in (b["contradiction_with"] or [])


def _linked_pairs(store: MemoryStore, agent_id: str | Sequence[str]) -> set[frozenset[str]]:
    links = store.engine.links_for_agent(agent_id)
    return {
        frozenset((s, d))
        for s, d, rel in zip(
            links["src_id"].to_pylist(), links["dst_id"].to_pylist(), links["rel"].to_pylist(), strict=True
        )
        if rel in ("contradicts", "supersedes")
    }


def _refresh(store: MemoryStore, rows: dict[str, Memory], applied: tuple[str, ...]) -> None:
    """Re-read what this pass just wrote, so a later batch claims this pass's own versions, not stale ones."""
    for fresh in store.get_many(list(applied), columns=_COLUMNS):
        rows[fresh["id"]] = fresh
