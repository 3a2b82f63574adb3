"""Write-time checks of ``remember``: semantic dedup and contradiction handling.

After exact dedup (done by the caller), the new row's nearest visible neighbours of the same agent decide:

* the store's merge judge (:func:`engram_pipeline.judge.same_fact`, the decision the corpus merge uses)
  calls the pair a duplicate: the write collapses into the existing row, which gains a
  ``duplicate_matches`` entry, a reinforcement and a fresh importance score; nothing new is inserted and
  the outcome is ``semantic_duplicate``;
* similarity in [``MEMORY_CONTRADICTION_THRESHOLD``, ``..._MAX``) and the rules of
  :mod:`engram_pipeline.claims` fire: policy ``flag`` marks both rows ``contradicted`` (both stay in recall)
  with a ``contradicts`` link; policy ``supersede`` hides the older row behind the new one, audited.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engram_pipeline.claims import detect_contradiction
from engram_pipeline.judge import same_fact
from engram_pipeline.model import Memory, dumps_metadata, loads_metadata, rows_to_table, utcnow
from engram_pipeline.scoring import importance_of, reinforce
from engram_pipeline.store.cas import CasResult
from engram_pipeline.store.results import RememberResult
from engram_pipeline.store.sql import eq

if TYPE_CHECKING:
    from engram_pipeline.store.core import MemoryStore

NEIGHBOURS = 8


def visible_neighbours(store: MemoryStore, agent_id: str, vector: list[float], k: int = NEIGHBOURS) -> list[Memory]:
    """The ``k`` nearest rows of the agent that recall would show, each with ``_similarity``."""
    where = f"{eq('agent_id', agent_id)} AND status NOT IN ('superseded', 'archived') AND superseded_by IS NULL"
    hits = store.memories.search(vector).metric("cosine").where(where, prefilter=True).limit(k).to_arrow().to_pylist()
    for h in hits:
        h["_similarity"] = 1.0 - float(h.pop("_distance"))
    return hits


def remember_row(store: MemoryStore, row: Memory, *, actor: str) -> RememberResult:
    s = store.settings
    neighbours = visible_neighbours(store, row["agent_id"], row["vector"])
    if any(n["content_hash"] == row["content_hash"] for n in neighbours):
        # The same content, committed by a racing writer since the exact check: the row that stays, untouched.
        existing = store._by_hash(row["agent_id"], row["content_hash"])
        if existing is not None:
            return RememberResult(existing, "exact_duplicate")
    for n in neighbours:
        # The corpus merge's judge decides (engram_pipeline/judge.py); its hard vetoes (contradiction,
        # negation, numbers, ...) keep a near-identical sentence that says something else from being lost.
        if same_fact(store, n["content"], row["content"], n["_similarity"], kinds=(n["kind"], row["kind"])).merge:
            return _collapse(store, n, row, actor=actor)
    found = []
    for n in neighbours:
        sim = n["_similarity"]
        # A vetoed duplicate is checked too: an embedder can score "lives in Berlin" / "lives in Munich"
        # above the duplicate threshold, and that contradiction must not go unrecorded.
        if not (s.contradiction_threshold <= sim < s.contradiction_threshold_max or sim >= s.duplicate_threshold):
            continue
        hit = detect_contradiction(row["content"], n["content"])
        if hit is not None:
            found.append((n, hit))
    inserted = store.insert_rows([row])
    if not inserted:  # a concurrent writer stored the same content first
        existing = store._by_hash(row["agent_id"], row["content_hash"])
        assert existing is not None
        return RememberResult(existing, "exact_duplicate")
    contradictions = tuple(_apply_contradiction(store, row, n, hit, actor=actor) for n, hit in found)
    # Without contradictions the stored row is exactly the one written: skip a read (a third of a remember).
    stored = store.get(row["id"], track_access=False) if contradictions else as_stored(store, row)
    return RememberResult(stored, "created", None, contradictions)


def as_stored(store: MemoryStore, row: Memory) -> Memory:
    """``row`` with exactly the types a read of the table returns (a round trip through Arrow, in memory)."""
    return rows_to_table([row], store.memory_schema).to_pylist()[0]


def _collapse(store: MemoryStore, existing: Memory, incoming: Memory, *, actor: str) -> RememberResult:
    """Fold a near-duplicate write into ``existing`` (compare-and-set, one retry on a concurrent edit)."""
    score = float(existing["_similarity"])

    def change(row: Memory) -> dict[str, Any]:
        now = utcnow()
        meta = loads_metadata(row)
        meta.setdefault("duplicate_matches", []).append(
            {
                "match_id": incoming["id"],
                "content": incoming["content"],
                "score": round(score, 6),
                "at": now.isoformat(),
            }
        )
        importance, factors = importance_of(row, now=now, half_life_days=store.settings.importance_half_life_days)
        return {
            "id": row["id"],
            "version": row["version"],
            "metadata": dumps_metadata(meta),
            "importance": importance,
            "importance_factors": factors,
            "reinforcement_count": int(row["reinforcement_count"] or 0) + 1,
            "confidence": reinforce(float(row["confidence"] or 0.5)),
            "tags": sorted(set(row["tags"] or []) | set(incoming["tags"] or [])),
        }

    store.cas_write([change(existing)], recompute=lambda fresh: [change(r) for r in fresh], actor=actor, action="dedup")
    return RememberResult(store.get(existing["id"], track_access=False), "semantic_duplicate", score)


def _apply_contradiction(store: MemoryStore, new: Memory, old: Memory, hit: Any, *, actor: str) -> dict[str, Any]:
    """Record a contradiction between the freshly inserted ``new`` row and ``old`` by the configured policy."""
    now = utcnow()
    info = {
        "memory_id": old["id"],
        "rule": hit.rule,
        "reason": hit.reason,
        "score": round(float(old["_similarity"]), 6),
        "policy": store.settings.contradiction_policy,
    }
    link = {"agent_id": new["agent_id"], "score": info["score"]}
    if store.settings.contradiction_policy == "supersede":
        mark_superseded(store, old, by=new["id"], reason=hit.reason, actor=actor, now=now)
        store.add_links([{**link, "src_id": new["id"], "dst_id": old["id"], "rel": "supersedes"}])
        return info
    mark_contradicted(store, [(new["id"], old["id"]), (old["id"], new["id"])], reason=hit.reason, actor=actor, now=now)
    store.add_links([{**link, "src_id": new["id"], "dst_id": old["id"], "rel": "contradicts"}])
    return info


def mark_contradicted(
    store: MemoryStore,
    pairs: list[tuple[str, str]],
    *,
    reason: str,
    actor: str,
    now: Any = None,
    run_id: str | None = None,
) -> list[str]:
    """Mark each ``(row, partner)``: status ``contradicted`` (unless hidden), partner added to
    ``contradiction_with``, reason and time in metadata. One compare-and-set batch; returns skipped ids."""
    result = mark_contradicted_many(
        store, [(row, partner, reason) for row, partner in pairs], actor=actor, now=now, run_id=run_id
    )
    return list(result.skipped_concurrent_edit)


def mark_contradicted_many(
    store: MemoryStore,
    pairs: Sequence[tuple[str, str, str]],
    *,
    actor: str,
    expected: Mapping[str, int] | None = None,
    still_valid: Callable[[Memory], bool] | None = None,
    now: Any = None,
    run_id: str | None = None,
) -> CasResult:
    """Record every ``(row, partner, reason)`` in one compare-and-set batch (give both directions of a pair).

    Each row gets status ``contradicted`` (a hidden row keeps its status), the partners added to
    ``contradiction_with`` and a ``contradictions`` entry (partner, reason, time) in its metadata; a row that
    already lists every partner is left alone. ``expected`` holds the versions the caller decided on (default:
    the versions read here); a row whose version moved is re-read once and re-marked only if
    ``still_valid(fresh_row)`` holds (say, its content is the one that was judged), else it counts as skipped.
    """
    now = now or utcnow()
    partners: dict[str, dict[str, str]] = {}
    for row_id, partner, why in pairs:
        partners.setdefault(row_id, {}).setdefault(partner, why)

    def change(row: Memory) -> dict[str, Any] | None:
        have = set(row["contradiction_with"] or [])
        want = have | set(partners[row["id"]])
        if want == have:
            return None
        meta = loads_metadata(row)
        for p in sorted(want - have):
            meta.setdefault("contradictions", []).append(
                {"with": p, "reason": partners[row["id"]][p], "at": now.isoformat()}
            )
        hidden = row["status"] in ("superseded", "archived") or row["superseded_by"] is not None
        return {
            "id": row["id"],
            "version": row["version"],
            "status": row["status"] if hidden else "contradicted",
            "contradiction_with": sorted(want),
            "metadata": dumps_metadata(meta),
        }

    return _cas_many(store, partners, change, expected, still_valid, actor, "contradiction", run_id, False)


def mark_superseded(
    store: MemoryStore,
    old: Memory,
    *,
    by: str,
    reason: str,
    actor: str,
    now: Any = None,
    run_id: str | None = None,
) -> bool:
    """Hide ``old`` behind ``by`` (status ``superseded``, ``superseded_by``), audited with its pre-image."""
    result = mark_superseded_many(store, [(old["id"], by, reason)], actor=actor, now=now, run_id=run_id)
    return bool(result.applied)


def mark_superseded_many(
    store: MemoryStore,
    items: Sequence[tuple[str, str, str]],
    *,
    actor: str,
    expected: Mapping[str, int] | None = None,
    still_valid: Callable[[Memory], bool] | None = None,
    now: Any = None,
    run_id: str | None = None,
) -> CasResult:
    """Hide each ``(row, by, reason)`` behind ``by`` in one audited compare-and-set batch.

    The row gets status ``superseded``, ``superseded_by`` and a ``superseded`` entry (by, reason, time) in its
    metadata; its full pre-image goes to the audit table (action ``supersede``), so ``restore`` brings it back.
    A row that is already hidden is left alone (its ``superseded_by`` is the durable marker and is never
    re-pointed). ``expected`` and ``still_valid`` as in :func:`mark_contradicted_many`.
    """
    now = now or utcnow()
    target: dict[str, dict[str, str]] = {}
    for row_id, by, why in items:
        target.setdefault(row_id, {by: why})

    def change(row: Memory) -> dict[str, Any] | None:
        if row["superseded_by"] is not None or row["status"] in ("superseded", "archived"):
            return None
        ((by, why),) = target[row["id"]].items()
        meta = loads_metadata(row)
        meta["superseded"] = {"by": by, "reason": why, "at": now.isoformat()}
        return {
            "id": row["id"],
            "version": row["version"],
            "status": "superseded",
            "superseded_by": by,
            "metadata": dumps_metadata(meta),
        }

    return _cas_many(store, target, change, expected, still_valid, actor, "supersede", run_id, True)


def _cas_many(
    store: MemoryStore,
    wanted: Mapping[str, Any],
    change: Callable[[Memory], dict[str, Any] | None],
    expected: Mapping[str, int] | None,
    still_valid: Callable[[Memory], bool] | None,
    actor: str,
    action: str,
    run_id: str | None,
    audit: bool,
) -> CasResult:
    """One compare-and-set batch of ``change(row)`` over the rows ``wanted``, claiming the ``expected``
    versions; on a miss, one recomputation from the fresh row when ``still_valid`` allows it."""
    invalid: list[str] = []

    def changes(rows: list[Memory], *, claim: bool) -> list[dict[str, Any]]:
        out = []
        for row in rows:
            if not claim and still_valid is not None and not still_valid(row):
                invalid.append(row["id"])
                continue
            c = change(row)
            if c is not None:
                if claim and expected is not None and row["id"] in expected:
                    # The version the caller judged: if the row moved since, this misses and is recomputed.
                    c["version"] = expected[row["id"]]
                out.append(c)
        return out

    rows = store.get_many(list(wanted))
    gone = sorted(set(wanted) - {r["id"] for r in rows})
    result = store.cas_write(
        changes(rows, claim=True),
        recompute=lambda fresh: changes(fresh, claim=False),
        actor=actor,
        action=action,
        run_id=run_id,
        audit=audit,
    )
    return dataclasses.replace(
        result,
        skipped_concurrent_edit=(*result.skipped_concurrent_edit, *gone, *invalid),
        unchanged=tuple(i for i in result.unchanged if i not in set(invalid)),
    )
