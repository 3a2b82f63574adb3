"""Ranking and visibility rules of recall.

Visibility: superseded rows (status ``superseded`` or any ``superseded_by``, the durable marker) are hidden
unless ``include_superseded``; archived rows unless ``include_archived``; expired short-term rows always;
contradicted and stale rows stay visible. ``tiers`` (hot, warm, cold, archive) and ``min_confidence``
filter by confidence.

Ranking over the nearest candidates::

    score = w_sim * similarity + w_rec * 0.5 ** (age_days / 30) + w_imp * significance
            - w_noise * max(0, t - information) / t

with ``w = (0.7, 0.2, 0.1, 0.5)`` by default (``ENGRAM_RECALL_WEIGHT_*``), ``t`` = ``ENGRAM_NOISE_THRESHOLD``
(0.3) and age from the last access, else creation. ``significance`` is the importance score without its own
recency factor (:func:`engram_pipeline.scoring.significance`): age is weighed once, by the recency term.
``information`` is the row's information score (:mod:`engram_pipeline.information`, the one the retention
policy reads): a fact (at or above ``t``) loses nothing, a row that says nothing loses up to 0.5, more than
the similarity by which small talk that shares the query's words beats the fact that answers it.

Evidence: a derived hit (a belief, procedure or schema) carries, in ``RecallHit.evidence``, up to ``evidence``
(default 3) of the memories it was derived from (``derived-from`` links) that no hit ranked above it returned,
best match first, whether this recall would hide them or not, and of the visible ones at most
:data:`VISIBLE_EVIDENCE` (1):

- hidden ones are the episodes the retention policy archived once they were consolidated
  (:mod:`engram_pipeline.lifecycle.retention`), so a question answered by an old turn still finds the turn;
- visible ones are turns the belief outranked: the belief that answers a question ranks above the turns it
  came from, and beliefs about the same person ranked above them too, so the turns fell out of the ``k``
  (on the labelled dialogues of issue 34, evidence recall@10 after the passes fell to 0.875 of before with
  MiniLM). A turn carried by a hit takes no slot of its own: the slot goes to the next candidate, and no row
  is returned twice. One is carried: it says where the belief comes from, and the others rank on their own;
  three per belief filled a reader's first ten ids with restatements of facts the question was not about
  (hashing embedder: 0.909 of before, 1.030 with one; MiniLM 1.207, 1.103 with one).

A visible derived source (a belief a schema summarises) is not carried: it answers on its own, with its own
evidence.

Recall then logs a read of what it returned, evidence included (one append to the access log; the passes fold
it into the rows, see ``engram_pipeline.store.access_log``), so recall never rewrites the rows it searches. A
source returned as a hit's evidence was returned to the caller, so it counts as recalled, hidden or visible:
its access count, its last access (recency) and the noise rule's "never recalled" see the read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from engram_pipeline.information import information_of
from engram_pipeline.model import CONFIDENCE_TIERS, INTERNAL_COLUMNS, Memory, utcnow
from engram_pipeline.scoring import significance, stored_information
from engram_pipeline.store.errors import InvalidInput
from engram_pipeline.store.sql import eq, lit
from engram_pipeline.store.validation import check_int, check_k, check_text, check_unit
from engram_pipeline.visibility import is_visible

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine

MAX_K = 100
# What ``with_vectors=False`` leaves out: the vector, and the CAS write token no reader uses. Every column
# read costs recall about 0.15 ms at 100k rows (``bench/bench_recall_latency.py``).
_NOT_SERVED = INTERNAL_COLUMNS


MAX_EVIDENCE = 10
# Visible sources a derived hit carries at most (hidden ones: up to ``evidence``). A visible turn ranks on its
# own; the one carried says where the belief comes from. More restate the same fact and fill a reader's first
# ids (issue 34: with the hashing embedder, beliefs about a person's other facts ranked first and their carried
# turns pushed the turns that answer out of the first ten ids).
VISIBLE_EVIDENCE = 1


@dataclass(frozen=True)
class RecallHit:
    memory: Memory
    score: float
    similarity: float
    recency: float
    # sources of a derived hit that are not among the hits, best match first (see the module docstring)
    evidence: tuple[Memory, ...] = field(default=())


def visibility_filter(
    agent_id: str,
    *,
    include_superseded: bool = False,
    include_archived: bool = False,
    tiers: Sequence[str] | None = None,
    min_confidence: float | None = None,
    now: datetime | None = None,
) -> str:
    """The SQL filter recall applies (every value quoted)."""
    conds = [eq("agent_id", agent_id)]
    if not include_superseded:
        conds.append("status <> 'superseded' AND superseded_by IS NULL")
    if not include_archived:
        conds.append("status <> 'archived'")
    when = (now or utcnow()).isoformat()
    conds.append(
        f"(expires_at IS NULL OR tier <> 'stm' OR expires_at > "
        f"arrow_cast({lit(when)}, 'Timestamp(Microsecond, Some(\"UTC\"))'))"
    )
    if tiers is not None:
        unknown = set(tiers) - set(CONFIDENCE_TIERS)
        if unknown or not tiers:
            raise InvalidInput(f"tiers must be among {', '.join(CONFIDENCE_TIERS)}; got {sorted(unknown) or '[]'}")
        conds.append("(" + " OR ".join(CONFIDENCE_TIERS[t].sql() for t in tiers) + ")")
    if min_confidence is not None:
        min_confidence = check_unit("min_confidence", min_confidence)
        conds.append(f"confidence >= {float(min_confidence)!r}")
    return " AND ".join(f"({c})" for c in conds)


def recall(
    store: Engine,
    agent_id: str,
    query: str | None = None,
    *,
    vector: Sequence[float] | None = None,
    k: int = 10,
    include_superseded: bool = False,
    include_archived: bool = False,
    tiers: Sequence[str] | None = None,
    min_confidence: float | None = None,
    track_access: bool = True,
    now: datetime | None = None,
    with_vectors: bool = True,
    evidence: int = 3,
) -> list[RecallHit]:
    """The ``k`` best memories of ``agent_id`` for a ``query`` text or a ``vector`` (exactly one).

    ``evidence`` (0..10) bounds the sources attached to each derived hit; 0 attaches none.

    ``with_vectors=False`` leaves ``vector`` (and the internal ``write_token``) out of the returned rows (the
    API does not send them; not reading and converting vectors saves a few milliseconds per recall).
    """
    check_k(k, high=MAX_K)
    check_int("evidence", evidence, low=0, high=MAX_EVIDENCE)
    if (query is None) == (vector is None):
        raise InvalidInput("give exactly one of query or vector")
    if query is not None:
        check_text("query", query)
    qvec = store._vector_for(query, None) if query is not None else store._vector_for("", vector)
    s = store.settings
    now = now or utcnow()
    where = visibility_filter(
        agent_id,
        include_superseded=include_superseded,
        include_archived=include_archived,
        tiers=tiers,
        min_confidence=min_confidence,
        now=now,
    )
    columns = None if with_vectors else [f.name for f in store.memory_schema if f.name not in _NOT_SERVED]
    pool = max(4 * k, 40)
    hits = candidates(store, qvec, where, pool=pool, columns=columns, shard=store.shard_of(agent_id)).to_pylist()
    if not hits:
        return []
    sim = 1.0 - np.array([h["_distance"] for h in hits], dtype=np.float64)
    age = np.array([_age_days(h, now) for h in hits])
    recency = np.exp(-math.log(2.0) * age / s.recall_recency_half_life_days)
    importance = np.array([significance(h["importance"], h.get("importance_factors")) for h in hits])
    score = s.recall_weight_similarity * sim + s.recall_weight_recency * recency
    score += s.recall_weight_importance * importance
    score -= s.recall_weight_noise * noise_share(hits, s.noise_threshold)
    order = np.lexsort((np.array([h["id"] for h in hits]), -score))
    rows = [{key: v for key, v in h.items() if key != "_distance"} for h in hits]
    out = _grouped(store, rows, order, k=k, sim=sim, qvec=qvec, limit=evidence, with_vectors=with_vectors)
    hit = [RecallHit(rows[i], float(score[i]), float(sim[i]), float(recency[i]), carried) for i, carried in out]
    if track_access:
        store.log_access([m for h in hit for m in (h.memory, *h.evidence)])
    return hit


def noise_share(rows: Sequence[Memory], threshold: float) -> np.ndarray:
    """How far each row's information score falls below ``threshold``, as a share of it: 0 for a fact, 1 for
    a row that says nothing. The stored score (``importance_factors``), else read from the content."""
    stored = [stored_information(r.get("importance_factors")) for r in rows]
    missing = [i for i, v in enumerate(stored) if v is None]
    if missing:
        for i, v in zip(missing, information_of([rows[i]["content"] or "" for i in missing]), strict=True):
            stored[i] = v
    info = np.array(stored, dtype=np.float64)
    return np.clip(threshold - info, 0.0, None) / threshold if threshold > 0 else np.zeros(len(rows))


def _grouped(
    store: Engine,
    rows: list[Memory],
    order: np.ndarray,
    *,
    k: int,
    sim: np.ndarray,
    qvec: Sequence[float],
    limit: int,
    with_vectors: bool,
) -> list[tuple[int, tuple[Memory, ...]]]:
    """The first ``k`` of ``rows`` in ``order``, each derived one with up to ``limit`` of its sources as
    evidence (see the module docstring), as ``(index into rows, evidence)``: a source carried by a hit takes
    no slot of its own, and no row is returned twice. One links lookup for the derived candidates and one read
    of their sources outside ``rows``, only when a derived row is among the candidates."""
    derived = {rows[i]["id"] for i in order if rows[i].get("source") == "derived"} if limit else set()
    if not derived:
        return [(int(i), ()) for i in order[:k]]
    links = [x for x in store.links_of(sorted(derived), rel="derived-from") if x["src_id"] in derived]
    sources_of: dict[str, list[str]] = {}
    for x in links:
        sources_of.setdefault(x["src_id"], []).append(x["dst_id"])
    pooled = {r["id"]: i for i, r in enumerate(rows)}
    agent = rows[0]["agent_id"]
    outside = sorted({x["dst_id"] for x in links} - pooled.keys())
    read = {r["id"]: r for r in store.get_many(outside) if r["agent_id"] == agent} if outside else {}
    q = np.asarray(qvec, dtype=np.float64)
    q = q / (np.linalg.norm(q) or 1.0)

    def cosine(mid: str) -> float:
        if mid in pooled:
            return float(sim[pooled[mid]])
        v = np.asarray(read[mid].get("vector") if read[mid].get("vector") is not None else (), dtype=np.float64)
        return float(v @ q / (np.linalg.norm(v) or 1.0)) if v.size == q.size else 0.0

    def carried(mid: str) -> bool:
        # a visible derived source (a belief under a schema) answers on its own, with its own evidence
        row = rows[pooled[mid]] if mid in pooled else read.get(mid)
        return row is not None and (not is_visible(row) or row.get("source") != "derived")

    def visible(mid: str) -> bool:
        return is_visible(rows[pooled[mid]] if mid in pooled else read[mid])

    out: list[tuple[int, tuple[Memory, ...]]] = []
    taken: set[str] = set()
    for i in order:
        row = rows[i]
        if row["id"] in taken:
            continue
        taken.add(row["id"])
        held = [m for m in dict.fromkeys(sources_of.get(row["id"], ())) if m not in taken and carried(m)]
        best = _carried(sorted(held, key=lambda m: (-cosine(m), m)), visible, limit) if row["id"] in derived else []
        taken.update(best)
        evidence = tuple(_served(rows[pooled[m]] if m in pooled else read[m], with_vectors) for m in best)
        out.append((int(i), evidence))
        if len(out) == k:
            break
    return out


def _carried(ranked: list[str], visible: Callable[[str], bool], limit: int) -> list[str]:
    """The first ``limit`` of a derived hit's ``ranked`` sources, at most :data:`VISIBLE_EVIDENCE` of them
    visible."""
    out: list[str] = []
    shown = 0
    for m in ranked:
        if len(out) == limit:
            break
        if visible(m):
            if shown == VISIBLE_EVIDENCE:
                continue
            shown += 1
        out.append(m)
    return out


def _served(row: Memory, with_vectors: bool) -> Memory:
    return row if with_vectors else {k: v for k, v in row.items() if k not in _NOT_SERVED}


def candidates(
    store: Engine,
    qvec: Sequence[float],
    where: str,
    *,
    pool: int,
    columns: list[str] | None = None,
    shard: int = 0,
) -> Any:
    """The ``pool`` nearest rows of ``shard`` passing ``where`` (Arrow, with ``_distance``), by exact cosine
    distance.

    Past ``ENGRAM_VECTOR_INDEX_MIN_ROWS`` the search runs on the IVF_HNSW_SQ index, whose quantized distances
    misorder close neighbours (recall@10 0.976 at 100k rows); ``refine_factor(1)`` re-reads the candidates'
    vectors and ranks them by exact distance (recall@10 1.0, about 1 ms more; ``bench_recall_latency.py``).
    Without an index the search is exact anyway and the refine is a no-op.
    """
    search = store.shards[shard].memories.search(qvec).metric("cosine").where(where, prefilter=True)
    search = search.limit(pool).refine_factor(1)
    if columns is not None:
        search = search.select([*columns, "_distance"])
    return search.to_arrow()


def _age_days(row: dict[str, Any], now: datetime) -> float:
    ref = row.get("last_accessed_at") or row.get("created_at") or now
    return max(0.0, (now - ref).total_seconds() / 86400.0)
