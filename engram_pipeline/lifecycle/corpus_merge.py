"""Review-gated corpus merge: collapse near-duplicate memories of one agent into one canonical each.

Two steps, so that a person can review what will be hidden before it is:

1. :func:`consolidate_corpus` (``dry_run=True``, the default) **plans**. From the agent's neighbour graph it
   takes the candidate pairs between rows that may be merged (visible, not contradicted, with a vector):
   cosine at least the judge's floor (:mod:`engram_pipeline.judge`; the rules judge's floor is
   ``MEMORY_CONSOLIDATION_MERGE_THRESHOLD``) with no upper bound, so a pair at or above
   ``MEMORY_DUPLICATE_THRESHOLD`` that an earlier write let through is merged too, and at most
   :data:`CANDIDATES_PER_ROW` nearest neighbours per row, so the judge's work grows linearly with the rows.
   The judge calls each candidate ``duplicate``, ``contradiction`` (the contradiction rules and the merge
   guard's hard vetoes: never merged) or ``distinct``. The ``duplicate`` pairs form star clusters
   (:func:`engram_pipeline.similarity.star_clusters`): every member is a duplicate *of its canonical*, so
   there are no chains of loosely related rows. The canonical is the row with the highest importance, the
   newest on ties, then the lowest id. A member must also be of the same kind and not pinned; episodes are
   never merged (two similar episodes are two occurrences, the evidence consolidation counts). The plan
   (the judge's name; per cluster: canonical id, content and version; members with id, content, similarity,
   the judge's reason and version) is stored with ``store.engine.save_plan``; memories are not touched.
2. :func:`apply_corpus_merge` **applies exactly a stored plan**. A canonical or member whose version moved
   since the plan is skipped and counted in ``skipped_concurrent_edit`` (the review was of that version, so
   nothing is recomputed); a skipped canonical skips its whole cluster. The canonical takes the union of its
   merged members' tags and a ``merged_from`` note; each member becomes ``superseded`` with ``superseded_by``,
   a ``merged`` note (canonical, reason, similarity, time, plan) and a ``duplicate-of`` link to the canonical,
   its pre-image audited with actor ``corpus_consolidation`` so that ``restore`` brings it back. Writes are one
   compare-and-set for the canonicals and one for the members per batch of clusters, then one commit for the
   links; the plan is then marked applied, and applying it again changes nothing. A killed apply resumes (same
   run id, same ``now``) from what the store holds, row by row, and reports the whole run.

:func:`plan_sweep` plans a set of agents of one shard in one run (one read, one judge call, one commit for the
new plans and one for the plans they expire, one cursor per shard); planning one agent is its sweep of one.
Applying stays per agent: a reviewer applies one agent's plan.

A reviewer may reject clusters of a plan by number when applying it (they are recorded and not proposed
again while their rows keep their content), or discard a plan whole; storing a plan expires the agent's older
pending ones. See :mod:`engram_pipeline.lifecycle.merge_review`.

The shells (HTTP, MCP, CLI, Dagster) apply only a plan named by its id (or, on the CLI and in Dagster, the
agent's only pending plan: with several pending, which one was reviewed is the caller's to say), and only for
an admin. ``consolidate_corpus(..., dry_run=False)`` plans and applies in one call, unreviewed: it is for
trusted library code and tests, and no shell calls it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.judge import get_judge
from engram_pipeline.lifecycle._batched import BatchResult, run_batched
from engram_pipeline.lifecycle._common import PassCursor, agent_frame, sweep_key
from engram_pipeline.lifecycle.graph import CANDIDATES_PER_ROW, VISIBLE_SQL, agent_graph
from engram_pipeline.lifecycle.merge_review import (
    APPLY_PASS,
    expire_superseded,
    expired_by,
    expired_in_run,
    plan_of,
    record_rejections,
    refuse_closed,
    rejected_numbers,
    vetoed_pairs,
)
from engram_pipeline.model import Memory, PlanRecord, dumps_metadata, loads_metadata
from engram_pipeline.similarity import nearest_per_row, star_clusters
from engram_pipeline.similarity.bands import filter_bands
from engram_pipeline.store.errors import InvalidInput

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

PLAN_PASS = "corpus_merge"
__all__ = [
    "APPLY_PASS", "apply_corpus_merge", "consolidate_corpus", "plan_clusters", "plan_clusters_of", "plan_sweep",
    "plan_to_apply",
]  # fmt: skip
ACTOR = "corpus_consolidation"
BATCH_CLUSTERS = 500
COUNTS = ("clusters", "merged", "skipped_concurrent_edit")
_COLUMNS = [
    "id", "kind", "content", "content_hash", "status", "contradiction_with", "importance", "created_at", "pinned",
    "version",
]  # fmt: skip


@dataclass(frozen=True)
class CorpusMergeReport:
    """A plan (``dry_run``) or an apply. ``merged`` counts members (planned to be, or actually) superseded;
    ``per_cluster`` is what a reviewer reads: each cluster's number, canonical and member contents with their
    similarities. ``rejected``: the cluster numbers the reviewer rejected (an apply); ``expired``: the older
    pending plans this plan expired."""

    scanned: int
    clusters: int
    merged: int
    skipped_concurrent_edit: int
    cursor: dict[str, Any]
    dry_run: bool
    per_cluster: tuple[dict[str, Any], ...]
    plan_id: str | None
    judge: str = ""  # the judge that decided the plan's merges (a plan's report only)
    rejected: tuple[int, ...] = ()
    expired: tuple[str, ...] = ()


def consolidate_corpus(
    store: MemoryStore,
    agent_id: str,
    *,
    dry_run: bool = True,
    graph: pa.Table | None = None,
    now: datetime | None = None,
    run_id: str | None = None,
) -> CorpusMergeReport:
    """Plan the agent's corpus merge and store the plan; with ``dry_run=False`` apply it too.

    ``graph`` is the agent's precomputed neighbour graph (any floor at or below the merge threshold). A plan
    identical to the agent's latest pending one is not stored twice: that plan's id is reported. The agent's
    pending plans older than the plan reported expire (see :mod:`~engram_pipeline.lifecycle.merge_review`).
    The plan is :func:`plan_sweep` of this one agent.
    """
    reports, cursor = _plan_sweep(store, [agent_id], graph=graph, now=now, run_id=run_id)
    planned = reports[agent_id]
    if dry_run:
        return planned
    applied = apply_corpus_merge(store, agent_id, planned.plan_id, now=cursor.now, run_id=cursor.run_id)
    return dataclasses.replace(applied, scanned=planned.scanned)


def plan_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    graph: pa.Table | None = None,
    now: datetime | None = None,
    run_id: str | None = None,
) -> dict[str, CorpusMergeReport]:
    """The corpus merge plan (a dry run) of every agent of ``agent_ids`` (all of one shard) in one run: each
    agent's report is :func:`consolidate_corpus` ``(store, agent)``'s. Applying stays per agent, after review.

    One cursor row and lease for the run (:func:`~engram_pipeline.lifecycle._common.sweep_key`: the agent's own
    for one agent, one per shard for several), one read of the agents' rows, their candidate pairs judged in one
    call, their pending plans read at once; the new plans are stored in one commit and the plans they supersede
    expire in one more. ``graph``, if given, holds the pairs of all the agents. A sweep with nothing new to plan
    commits nothing. A killed sweep resumes from its cursor (same ``now`` and run id): it keeps the plans its
    killed attempt stored and reports what that attempt expired. The cursor records the run: for one agent its
    ``plan_id`` and ``clusters``; for several, how many agents have a plan (``plans``), how many were stored anew
    (``saved``) and expired (``expired``), and the clusters in all.
    """
    if not agent_ids:
        return {}
    return _plan_sweep(store, agent_ids, graph=graph, now=now, run_id=run_id)[0]


def _plan_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    graph: pa.Table | None,
    now: datetime | None,
    run_id: str | None,
) -> tuple[dict[str, CorpusMergeReport], PassCursor]:
    """:func:`plan_sweep`, and the run's cursor (its ``now`` and run id, for an apply that follows)."""
    agents = sorted(set(agent_ids))
    key, scope = sweep_key(agents, store.settings.shards)
    cursor = PassCursor.deferred(store, PLAN_PASS, key, now=now, run_id=run_id, scope=scope, agents=agents)
    judge = get_judge(store)
    planned = plan_clusters_of(store, agents, graph=graph)
    body = {"planned_at": cursor.now.isoformat(), "band": [judge.floor, 1.0], "judge": judge.name}

    def decide(pending: dict[str, list[PlanRecord]]) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        """The agents whose latest pending plan is this plan (its id), and the plans to store."""
        kept, new = {}, {}
        for agent in agents:
            clusters, plans = planned[agent][1], pending.get(agent)
            if plans and plans[-1]["body"].get("clusters") == clusters:
                kept[agent] = str(plans[-1]["plan_id"])
            elif clusters or plans:  # no clusters and nothing pending: there is no plan to store
                new[agent] = {**body, "clusters": clusters}
        return kept, new

    pending = store.engine.plans_of_agents(agents, status="pending")
    kept, new = decide(pending)
    if new:
        cursor.begin()
        if cursor.stale:  # another run stored plans since the read: decide against what it left
            pending = store.engine.plans_of_agents(agents, status="pending")
            kept, new = decide(pending)
    run_of = {p["plan_id"]: p["run_id"] for plans in pending.values() for p in plans}
    saved = store.engine.save_plans(new, run_id=cursor.run_id)
    plan_ids = {**kept, **saved}
    expired = expire_superseded(store, plan_ids, pending, run_id=cursor.run_id, before_write=cursor.begin)
    ours = {a for a, p in kept.items() if run_of.get(p) == cursor.run_id}  # stored by a killed attempt of this run
    if cursor.state.get("resumed"):  # report the whole run: what its killed attempts expired too
        expired = expired_in_run(store, plan_ids, cursor.run_id)
    clusters = {agent: planned[agent][1] for agent in agents}
    if len(agents) == 1:  # one agent: its own cursor, as it always was
        summary: dict[str, Any] = {"plan_id": plan_ids.get(key), "clusters": len(clusters[key])}
    else:
        summary = {
            "plans": len(plan_ids),
            "saved": len(saved) + len(ours),
            "expired": sum(map(len, expired.values())),
            "clusters": sum(map(len, clusters.values())),
        }
    state = cursor.finish(**summary)
    reports = {
        agent: CorpusMergeReport(
            scanned=planned[agent][0],
            clusters=len(clusters[agent]),
            merged=sum(len(c["members"]) for c in clusters[agent]),
            skipped_concurrent_edit=0,
            cursor=state,
            dry_run=True,
            per_cluster=tuple(_review(n, c) for n, c in enumerate(clusters[agent], start=1)),
            plan_id=plan_ids.get(agent),
            judge=judge.name,
            expired=expired.get(agent, ()),
        )
        for agent in agents
    }
    return reports, cursor


def plan_clusters(
    store: MemoryStore, agent_id: str, *, graph: pa.Table | None = None
) -> tuple[int, list[dict[str, Any]]]:
    """The rows read and the merge clusters of the agent (JSON-ready dicts, as stored in a plan)."""
    return plan_clusters_of(store, [agent_id], graph=graph)[agent_id]


def plan_clusters_of(
    store: MemoryStore, agent_ids: Sequence[str], *, graph: pa.Table | None = None
) -> dict[str, tuple[int, list[dict[str, Any]]]]:
    """:func:`plan_clusters` of every agent of ``agent_ids`` from one read of their rows and one call of the
    judge over all their candidates (``graph``, if given, holds the pairs of all of them). No pair spans two
    agents, and every decision below is per pair or per row, so each agent's clusters are those of its own."""
    agents = sorted(set(agent_ids))
    columns = ["agent_id", *_COLUMNS]
    frame = agent_frame(store, agents, columns=columns, where=f"{VISIBLE_SQL} AND vector IS NOT NULL")
    scanned = Counter(frame["agent_id"].to_list())
    out: dict[str, tuple[int, list[dict[str, Any]]]] = {agent: (scanned[agent], []) for agent in agents}
    # Contradicted rows are never merged, even once decay has rewritten their status to "stale". Episodes are
    # not merged either: two similar episodes are two occurrences (the evidence consolidation counts), not
    # one fact said twice.
    mergeable = frame.filter(
        pl.col("status").is_in(["active", "stale"])
        & (pl.col("contradiction_with").list.len().fill_null(0) == 0)
        & (pl.col("kind") != "episodic")
    )
    judge = get_judge(store)
    graph = agent_graph(store, agents) if graph is None else graph
    ids = mergeable["id"].to_list()
    keep = pa.array(ids, pa.string())
    pairs = filter_bands(graph, ((judge.floor, None),))  # the judge's candidates: no upper bound
    pairs = pairs.filter(pc.and_(pc.is_in(pairs["src_id"], value_set=keep), pc.is_in(pairs["dst_id"], value_set=keep)))
    # A pair of one cluster a reviewer rejected is not a candidate while both rows keep the rejected content.
    vetoed = vetoed_pairs(store, agents, dict(zip(ids, mergeable["content_hash"].to_list(), strict=True)))
    if vetoed and pairs.num_rows:
        ends = zip(pairs["src_id"].to_pylist(), pairs["dst_id"].to_pylist(), strict=True)
        pairs = pairs.filter(pa.array([frozenset(e) not in vetoed for e in ends]))
    pairs = nearest_per_row(pairs, CANDIDATES_PER_ROW)
    if pairs.num_rows == 0:
        return out
    involved = set(pairs["src_id"].to_pylist()) | set(pairs["dst_id"].to_pylist())
    rows = {r["id"]: r for r in mergeable.filter(pl.col("id").is_in(list(involved))).to_dicts()}
    candidates = list(
        zip(pairs["src_id"].to_pylist(), pairs["dst_id"].to_pylist(), pairs["score"].to_pylist(), strict=True)
    )
    verdicts = judge.judge([(rows[a]["content"], rows[b]["content"], float(x)) for a, b, x in candidates])
    # The judge is symmetric (features and vetoes); keep its duplicates only, as the clusters' band.
    duplicates = [i for i, v in enumerate(verdicts) if v.merge]
    reason = {frozenset(candidates[i][:2]): verdicts[i].reason for i in duplicates}
    pairs = pairs.take(pa.array(duplicates, pa.int64()))
    # Best canonical first: highest importance, newest on ties, then lowest id.
    order = (
        pl.DataFrame(list(rows.values()))
        .with_columns(pl.col("importance").fill_null(0.0))
        .sort(["importance", "created_at", "id"], descending=[True, True, False], nulls_last=True)["id"]
        .to_list()
    )
    reasons: dict[tuple[str, str], str | None] = {}

    def eligible(canonical: str, member: str) -> bool:
        key = (canonical, member)
        if key not in reasons:
            c, m = rows[canonical], rows[member]
            ok = c["kind"] == m["kind"] and not m["pinned"]
            reasons[key] = reason[frozenset(key)] if ok else None
        return reasons[key] is not None

    # One agent's stars never reach another's rows, so the stars of all agents at once, in the canonicals'
    # order, are each agent's stars in its own order.
    for canonical, members in star_clusters(pairs, order, -1.0, float("inf"), eligible):
        c = rows[canonical]
        out[c["agent_id"]][1].append(
            {
                "canonical": {"id": canonical, "content": c["content"], "version": int(c["version"])},
                "members": [
                    {
                        "id": m,
                        "content": rows[m]["content"],
                        "similarity": round(float(sim), 6),
                        "reason": reasons[(canonical, m)],
                        "version": int(rows[m]["version"]),
                    }
                    for m, sim in members
                ],
            }
        )
    return out


def apply_corpus_merge(
    store: MemoryStore,
    agent_id: str,
    plan_id: str | None = None,
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    batch_size: int = BATCH_CLUSTERS,
    reject: Iterable[int] = (),
    actor: str = "reviewer",
) -> CorpusMergeReport:
    """Apply exactly the stored plan ``plan_id`` (default: the agent's only pending plan); see the module doc.

    ``reject``: numbers of clusters not to merge (1-based, in plan order: the review table's ``cluster``); they
    are recorded as rejected by ``actor`` and not proposed again while their rows keep their content.

    Raises :class:`PlanNotFound` (a ``LookupError``) for an unknown plan id, ``InvalidInput`` (a
    ``ValueError``) for a plan of another agent, a cluster number the plan does not have, and for no
    ``plan_id`` while several plans are pending, and :class:`PlanClosed` (an ``InvalidInput``) for a discarded
    or expired plan; nothing is written then. With no pending plan, or a plan already applied, nothing is
    written and the report counts zeros.

    Resumable and idempotent per row: the cursor (with the plan id, ``now`` and run id) is saved before the first
    commit, and a resumed run judges every row by what the store holds (a member already ``superseded_by`` its
    canonical for this plan is done; its missing link is written), so a run killed anywhere ends, once resumed,
    in the state and the counts of an uninterrupted run.
    """
    plan = plan_to_apply(store, agent_id, plan_id)
    if plan is None:
        if reject:
            raise InvalidInput(f"agent {agent_id!r} has no pending corpus-merge plan: nothing to reject")
        return CorpusMergeReport(0, 0, 0, 0, {"pending_plan": None}, False, (), None)
    plan_id = str(plan["plan_id"])
    rejected = rejected_numbers(plan, reject)
    if plan["status"] == "applied":
        return CorpusMergeReport(0, 0, 0, 0, {"plan_id": plan_id, "already_applied": True}, False, (), plan_id)
    saved = store.engine.get_cursor(APPLY_PASS, agent_id) or {}
    if run_id is None and saved.get("done") and saved.get("scope") == {"plan_id": plan_id}:
        # killed after finishing its cursor, before marking the plan applied: the same run, with its id
        run_id, now = saved["run_id"], datetime.fromisoformat(saved["now"])
    cursor = PassCursor.start(store, APPLY_PASS, agent_id, now=now, run_id=run_id, scope={"plan_id": plan_id})
    cursor.state["plan_id"] = plan_id
    fresh = store.engine.get_plan(plan_id)  # a run we waited for may have applied it meanwhile
    if fresh is not None and fresh["status"] == "applied":
        cursor.finish(abandoned_for={"already_applied": plan_id})
        return CorpusMergeReport(0, 0, 0, 0, {"plan_id": plan_id, "already_applied": True}, False, (), plan_id)
    record_rejections(store, plan, rejected, actor=actor, run_id=cursor.run_id)
    numbered = list(enumerate(plan["body"].get("clusters", []), start=1))
    clusters = {c["canonical"]["id"]: c for n, c in numbered if n not in rejected}
    run = run_batched(
        cursor,
        pl.DataFrame({"canonical": sorted(clusters)}, schema={"canonical": pl.String}),
        lambda batch: _apply_batch(store, [clusters[c] for c in batch["canonical"]], plan_id, cursor),
        size=batch_size,
        counts=COUNTS,
        key="canonical",
    )
    report = CorpusMergeReport(
        scanned=sum(1 + len(c["members"]) for c in clusters.values()),
        clusters=run.counts["clusters"],
        merged=run.counts["merged"],
        skipped_concurrent_edit=run.counts["skipped_concurrent_edit"],
        cursor=run.cursor,
        dry_run=False,
        per_cluster=tuple(_review(n, c, run.outcome, rejected=n in rejected) for n, c in numbered),
        plan_id=plan_id,
        rejected=rejected,
    )
    store.engine.mark_plan_applied(plan_id, {k: v for k, v in dataclasses.asdict(report).items() if k != "per_cluster"})
    return report


def plan_to_apply(store: MemoryStore, agent_id: str, plan_id: str | None = None) -> PlanRecord | None:
    """The plan an apply would write: ``plan_id`` (which must exist, be ``agent_id``'s and be neither discarded
    nor expired), or without it the agent's only pending plan (None if there is none). Several pending plans
    are refused, naming them: a plan made after the review (say, once a near-duplicate was imported) must
    never be applied in its place."""
    if plan_id:
        plan = plan_of(store, agent_id, plan_id)
        refuse_closed(plan)
        return plan
    pending = store.engine.plans_of(agent_id, status="pending")
    if len(pending) > 1:
        listed = ", ".join(f"{p['plan_id']} ({len(p['body'].get('clusters', []))} clusters)" for p in pending)
        raise InvalidInput(
            f"agent {agent_id!r} has {len(pending)} pending corpus-merge plans: {listed}; "
            "name the one that was reviewed (plan_id, --plan-id)"
        )
    if not pending:
        return None
    # The only pending plan may have expired the one that was reviewed: which it was is the caller's to say.
    newest = str(pending[0]["plan_id"])
    replaced = [p["plan_id"] for p in store.engine.plans_of(agent_id, status="expired") if expired_by(p) == newest]
    if replaced:
        raise InvalidInput(
            f"agent {agent_id!r} has one pending corpus-merge plan, {newest}, made after {', '.join(replaced)} "
            f"(which expired then); name the one that was reviewed (plan_id, --plan-id): an expired plan "
            f"cannot be applied, so review {newest} if it was not"
        )
    return pending[0]


def _totals(clusters: Iterable[dict[str, Any]], outcome: dict[str, str]) -> dict[str, int]:
    """The counts of ``clusters``, from the outcome of each of their rows."""
    n_clusters = merged = skipped = 0
    for c in clusters:
        members = [outcome.get(m["id"]) for m in c["members"]]
        if outcome.get(c["canonical"]["id"]) == "skipped_concurrent_edit":
            skipped += 1 + len(members)
            continue
        n_clusters += "merged" in members
        merged += members.count("merged")
        skipped += members.count("skipped_concurrent_edit")
    return {"clusters": n_clusters, "merged": merged, "skipped_concurrent_edit": skipped}


def _apply_batch(store: MemoryStore, clusters: list[dict[str, Any]], plan_id: str, cursor: PassCursor) -> BatchResult:
    """Bring one batch of planned clusters to their merged state: one compare-and-set for the canonicals, one
    for the members, one commit for the missing links; each step skips what an earlier attempt already did.
    Returns the batch's counts and every row's outcome, judged from what the store holds (so a batch redone
    after a kill counts what its killed attempt wrote)."""
    outcome: dict[str, str] = {}
    ids = [c["canonical"]["id"] for c in clusters] + [m["id"] for c in clusters for m in c["members"]]
    current = {r["id"]: r for r in store.get_many(ids)}
    now = cursor.now.isoformat()
    canon_changes: list[dict[str, Any]] = []
    ready: list[tuple[str, list[tuple[dict[str, Any], Memory]]]] = []  # (canonical, members to supersede)
    done: list[tuple[str, dict[str, Any]]] = []  # (canonical, member) pairs merged, now or by an earlier attempt
    earlier: set[str] = set()  # canonicals an earlier, killed attempt already wrote
    for cluster in clusters:
        canon = cluster["canonical"]
        row = current.get(canon["id"])
        stamped = _stamped(row, plan_id) if row is not None else set()
        if not stamped and (row is None or row["version"] != canon["version"]):
            outcome[canon["id"]] = "skipped_concurrent_edit"
            continue
        members = []
        for m in cluster["members"]:
            mrow = current.get(m["id"])
            if mrow is not None and _merged_into(mrow, canon["id"], plan_id):
                done.append((canon["id"], m))  # superseded by an earlier attempt of this apply
            elif mrow is not None and mrow["version"] == m["version"] and (not stamped or m["id"] in stamped):
                members.append((m, mrow))
            else:
                outcome[m["id"]] = "skipped_concurrent_edit"
        if stamped:  # the canonical was written by an earlier, killed attempt: finish its members
            earlier.add(canon["id"])
            ready.append((canon["id"], members))
            continue
        if not members:
            continue
        assert row is not None
        meta = loads_metadata(row)
        meta.setdefault("merged_from", []).extend(
            {"id": m["id"], "similarity": m["similarity"], "at": now, "plan_id": plan_id} for m, _ in members
        )
        tags = set(row["tags"] or []).union(*(set(r["tags"] or []) for _, r in members))
        canon_changes.append(
            {"id": canon["id"], "version": canon["version"], "tags": sorted(tags), "metadata": dumps_metadata(meta)}
        )
        ready.append((canon["id"], members))
    # No recompute: a row that moved since the plan is skipped, never re-judged behind the reviewer's back.
    canon_result = store.engine.cas_write(
        canon_changes, actor=ACTOR, action="merge_canonical", run_id=cursor.run_id, audit=True
    )
    written = set(canon_result.applied) | earlier
    member_changes, planned = [], {}
    for canon_id, members in ready:
        if canon_id not in written:
            outcome[canon_id] = "skipped_concurrent_edit"
            continue
        outcome[canon_id] = "canonical"
        for m, mrow in members:
            meta = loads_metadata(mrow)
            meta["merged"] = {
                "into": canon_id,
                "reason": m["reason"],
                "similarity": m["similarity"],
                "at": now,
                "plan_id": plan_id,
                "run_id": cursor.run_id,
            }
            member_changes.append(
                {
                    "id": m["id"],
                    "version": m["version"],
                    "status": "superseded",
                    "superseded_by": canon_id,
                    "metadata": dumps_metadata(meta),
                }
            )
            planned[m["id"]] = (canon_id, m)
    result = store.engine.cas_write(member_changes, actor=ACTOR, action="merge", run_id=cursor.run_id, audit=True)
    done.extend(planned[m_id] for m_id in result.applied)
    for m_id in result.skipped_concurrent_edit:
        outcome[m_id] = "skipped_concurrent_edit"
    for _, m in done:
        outcome[m["id"]] = "merged"
    links = [
        {"agent_id": cursor.agent_id, "src_id": m["id"], "dst_id": c, "rel": "duplicate-of", "score": m["similarity"]}
        for c, m in done
    ]
    store.engine.add_links(links, run_id=cursor.run_id, keyed=True)
    return BatchResult(_totals(clusters, outcome), outcome)


def _stamped(row: Memory, plan_id: str) -> set[str]:
    """The members a canonical was written for by this plan (empty: not written yet)."""
    return {e["id"] for e in loads_metadata(row).get("merged_from", []) if e.get("plan_id") == plan_id}


def _merged_into(row: Memory, canonical: str, plan_id: str) -> bool:
    merged = loads_metadata(row).get("merged") or {}
    return row["superseded_by"] == canonical and merged.get("plan_id") == plan_id


def _review(
    number: int, cluster: dict[str, Any], outcome: dict[str, str] | None = None, *, rejected: bool = False
) -> dict[str, Any]:
    """Cluster ``number`` of a plan as a reviewer reads it (with each row's outcome after an apply)."""
    canon = cluster["canonical"]
    if rejected:
        outcome = {canon["id"]: "rejected"} | {m["id"]: "rejected" for m in cluster["members"]}
    out: dict[str, Any] = {
        "cluster": number,
        "canonical_id": canon["id"],
        "canonical": canon["content"],
        "members": [
            {"id": m["id"], "content": m["content"], "similarity": m["similarity"], "reason": m["reason"]}
            | ({"outcome": outcome.get(m["id"], "not_applied")} if outcome is not None else {})
            for m in cluster["members"]
        ],
    }
    if outcome is not None:
        out["outcome"] = outcome.get(canon["id"], "not_applied")
    return out
