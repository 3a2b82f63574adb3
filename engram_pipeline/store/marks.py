"""Contradiction and supersession marks: how a pair judged to contradict is recorded on its rows.

One module for both writers of these marks, the write path (a new row against its stored neighbours,
:func:`apply_contradictions`) and the contradiction pass (:mod:`engram_pipeline.lifecycle.contradictions`,
through :func:`mark_contradicted_many` and :func:`mark_superseded_many`). Every mark is one compare-and-set
batch (:meth:`~engram_pipeline.store.core.ShardedEngine.cas_write`); a supersession is audited with the row's
pre-image, so ``restore`` brings the row back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engram_pipeline.model import Memory, dumps_metadata, loads_metadata, utcnow
from engram_pipeline.store.results import CasResult
from engram_pipeline.visibility import is_visible

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine


def apply_contradictions(
    store: Engine, found: Sequence[tuple[Memory, Memory, Any]], *, actor: str
) -> list[dict[str, Any]]:
    """Record each contradiction ``(new, old, hit)`` between a freshly inserted row and an older one by the
    configured policy, in one compare-and-set batch and one append of links; returns what each recorded."""
    if not found:
        return []
    now = utcnow()
    policy = store.settings.contradiction_policy
    rel = "supersedes" if policy == "supersede" else "contradicts"
    infos, links = [], []
    for new, old, hit in found:
        score = round(float(old["_similarity"]), 6)
        infos.append({"memory_id": old["id"], "rule": hit.rule, "reason": hit.reason, "score": score, "policy": policy})
        links.append({"agent_id": new["agent_id"], "score": score, "src_id": new["id"], "dst_id": old["id"]})
    if policy == "supersede":
        hide = [(old["id"], new["id"], hit.reason) for new, old, hit in found]
        mark_superseded_many(store, hide, actor=actor, now=now)
    else:
        pairs = [(a["id"], b["id"], hit.reason) for new, old, hit in found for a, b in ((new, old), (old, new))]
        mark_contradicted_many(store, pairs, actor=actor, now=now)
    store.add_links([{**link, "rel": rel} for link in links])
    return infos


def mark_contradicted(
    store: Engine,
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
    store: Engine,
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
        hidden = not is_visible(row)
        return {
            "id": row["id"],
            "version": row["version"],
            "status": row["status"] if hidden else "contradicted",
            "contradiction_with": sorted(want),
            "metadata": dumps_metadata(meta),
        }

    return _cas_many(store, partners, change, expected, still_valid, actor, "contradiction", run_id, False)


def mark_superseded(
    store: Engine,
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
    store: Engine,
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
        if not is_visible(row):
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
    store: Engine,
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
