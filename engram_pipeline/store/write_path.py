"""Write-time checks of ``remember``: semantic dedup and contradiction handling.

After exact dedup (done by the caller), the new row's nearest visible neighbours of the same agent decide:

* similarity >= ``MEMORY_DUPLICATE_THRESHOLD`` (and the contradiction rules stay silent): the write collapses
  into the existing row, which gains a ``duplicate_matches`` entry, a reinforcement and a fresh importance
  score; nothing new is inserted and the outcome is ``semantic_duplicate``;
* similarity in [``MEMORY_CONTRADICTION_THRESHOLD``, ``..._MAX``) and the rules of
  :mod:`engram_pipeline.claims` fire: policy ``flag`` marks both rows ``contradicted`` (both stay in recall)
  with a ``contradicts`` link; policy ``supersede`` hides the older row behind the new one, audited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engram_pipeline.model import Memory, dumps_metadata, loads_metadata, utcnow
from engram_pipeline.scoring import importance_of, reinforce
from engram_pipeline.store.sql import eq

if TYPE_CHECKING:
    from engram_pipeline.store.core import MemoryStore, RememberResult

NEIGHBOURS = 8


def visible_neighbours(
    store: MemoryStore, agent_id: str, vector: list[float], k: int = NEIGHBOURS
) -> list[Memory]:
    """The ``k`` nearest rows of the agent that recall would show, each with ``_similarity``."""
    where = (
        f"{eq('agent_id', agent_id)} AND status NOT IN ('superseded', 'archived') AND superseded_by IS NULL"
    )
    hits = (
        store.memories.search(vector)
        .metric("cosine")
        .where(where, prefilter=True)
        .limit(k)
        .to_arrow()
        .to_pylist()
    )
    for h in hits:
        h["_similarity"] = 1.0 - float(h.pop("_distance"))
    return hits


def remember_row(store: MemoryStore, row: Memory, *, actor: str) -> RememberResult:
    from engram_pipeline.claims import detect_contradiction
    from engram_pipeline.store.core import RememberResult

    s = store.settings
    neighbours = visible_neighbours(store, row["agent_id"], row["vector"])
    for n in neighbours:
        if (
            n["_similarity"] >= s.duplicate_threshold
            and detect_contradiction(row["content"], n["content"]) is None
        ):
            return _collapse(store, n, row, actor=actor)
    found = []
    for n in neighbours:
        if not s.contradiction_threshold <= n["_similarity"] < s.contradiction_threshold_max:
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
    return RememberResult(store.get(row["id"], track_access=False), "created", None, contradictions)


def _collapse(store: MemoryStore, existing: Memory, incoming: Memory, *, actor: str) -> RememberResult:
    """Fold a near-duplicate write into ``existing`` (compare-and-set, one retry on a concurrent edit)."""
    from engram_pipeline.store.core import RememberResult

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
        importance, factors = importance_of(
            row, now=now, half_life_days=store.settings.importance_half_life_days
        )
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

    store.cas_write(
        [change(existing)], recompute=lambda fresh: [change(r) for r in fresh], actor=actor, action="dedup"
    )
    return RememberResult(store.get(existing["id"], track_access=False), "semantic_duplicate", score)


def _apply_contradiction(
    store: MemoryStore, new: Memory, old: Memory, hit: Any, *, actor: str
) -> dict[str, Any]:
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
    mark_contradicted(
        store, [(new["id"], old["id"]), (old["id"], new["id"])], reason=hit.reason, actor=actor, now=now
    )
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
    now = now or utcnow()
    partners: dict[str, set[str]] = {}
    for row_id, partner in pairs:
        partners.setdefault(row_id, set()).add(partner)

    def change(row: Memory) -> dict[str, Any] | None:
        have = set(row["contradiction_with"] or [])
        want = have | partners[row["id"]]
        if want == have:
            return None
        meta = loads_metadata(row)
        for p in sorted(want - have):
            meta.setdefault("contradictions", []).append({"with": p, "reason": reason, "at": now.isoformat()})
        hidden = row["status"] in ("superseded", "archived") or row["superseded_by"] is not None
        return {
            "id": row["id"],
            "version": row["version"],
            "status": row["status"] if hidden else "contradicted",
            "contradiction_with": sorted(want),
            "metadata": dumps_metadata(meta),
        }

    def changes(rows: list[Memory]) -> list[dict[str, Any]]:
        return [c for c in (change(r) for r in rows) if c is not None]

    result = store.cas_write(
        changes(store.get_many(list(partners))),
        recompute=changes,
        actor=actor,
        action="contradiction",
        run_id=run_id,
    )
    return list(result.skipped_concurrent_edit)


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
    now = now or utcnow()

    def change(row: Memory) -> dict[str, Any]:
        meta = loads_metadata(row)
        meta["superseded"] = {"by": by, "reason": reason, "at": now.isoformat()}
        return {
            "id": row["id"],
            "version": row["version"],
            "status": "superseded",
            "superseded_by": by,
            "metadata": dumps_metadata(meta),
        }

    fresh = store.get_many([old["id"]])
    if not fresh:
        return False
    result = store.cas_write(
        [change(fresh[0])],
        recompute=lambda rows: [change(r) for r in rows],
        actor=actor,
        action="supersede",
        run_id=run_id,
        audit=True,
    )
    return bool(result.applied)
