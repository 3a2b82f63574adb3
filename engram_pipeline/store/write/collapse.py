"""The collapse of a near-duplicate write into its stored row: the row gains a ``duplicate_matches`` entry, a
reinforcement and a fresh importance score, and nothing new is inserted (outcome ``semantic_duplicate``).

The collapses of a batch are one compare-and-set: one per write made writers whose writes all collapsed
commit one after another (``docs/scale.md``). A row edited meanwhile is read again and folded into as it now
is; a row deleted meanwhile sends its write back to be checked again (:class:`FoldTargetGone`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engram_pipeline.model import Memory, confidence_of, dumps_metadata, loads_metadata, utcnow
from engram_pipeline.scoring import importance_of, reinforce
from engram_pipeline.store.errors import MemoryNotFound, StoreError, VersionConflict
from engram_pipeline.store.results import RememberResult
from engram_pipeline.store.write.reads import rows_by_id

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine

Merge = tuple[int, Memory, Memory, str]
"""A near duplicate waiting to collapse: its index in the batch, the stored row (as its check read it), the new
row and its actor."""


def collapse_writes(store: Engine, merges: Sequence[Merge], out: list[RememberResult | BaseException | None]) -> None:
    """Fold each near-duplicate write of ``merges`` into its stored row, in order, in one compare-and-set
    (:func:`collapse_many`), then tell each writer its row as read after it.

    The stored rows are read whole first (a neighbour holds the :data:`~.view.CHECKED` columns only), at their
    latest version: a row moved since the checks is folded into as the compare-and-set's retry would have
    (it re-reads and folds again). A writer whose row is gone gets :class:`FoldTargetGone` (its write is
    checked again: :func:`.batch.remember_batch`); an error of a read or of a compare-and-set reaches the
    writers it holds, and only them. The writers of several writes into one row are all told the row with
    every fold of the batch (as a read after one's own collapse can be under concurrent writers)."""
    try:
        whole = rows_by_id(store, [into for _, into, _, _ in merges])
    except Exception as exc:
        _tell(out, merges, exc)
        return
    done: list[Merge] = []
    for merge in merges:
        index, into, _, _ = merge
        if into["id"] in whole:
            done.append(merge)
        else:
            out[index] = FoldTargetGone(into["id"])
    if not done:
        return
    try:
        # One compare-and-set whatever the writers' actors: a collapse is not audited, and cas_write records
        # the actor only in an audit event.
        failed = collapse_many(
            store, [(whole[into["id"]], row, _score(into)) for _, into, row, _ in done], actor=done[0][3]
        )
    except Exception as exc:
        _tell(out, done, exc)
        return
    for index, into, _, _ in done:
        if into["id"] in failed:
            lost = failed[into["id"]]
            out[index] = FoldTargetGone(into["id"]) if isinstance(lost, MemoryNotFound) else lost
    done = [m for m in done if m[1]["id"] not in failed]
    if not done:
        return
    try:
        read = rows_by_id(store, [into for _, into, _, _ in done], as_get=True)
    except Exception as exc:
        _tell(out, done, exc)
        return
    for index, into, _, _ in done:
        found = read.get(into["id"])
        out[index] = (
            FoldTargetGone(into["id"]) if found is None else RememberResult(found, "semantic_duplicate", _score(into))
        )


class FoldTargetGone(MemoryNotFound):
    """The row a near-duplicate write was to fold into is gone: the write is checked again."""


def _tell(out: list[RememberResult | BaseException | None], merges: Sequence[Merge], exc: BaseException) -> None:
    for index, *_ in merges:
        out[index] = exc


def _score(neighbour: Memory) -> float:
    return float(neighbour["_similarity"])


def collapse_many(
    store: Engine, merges: Sequence[tuple[Memory, Memory, float]], *, actor: str
) -> dict[str, StoreError]:
    """Fold each ``(existing, incoming, score)`` near-duplicate write into its existing row, in one
    compare-and-set batch; several writes into one row are folded in order, as that many collapses one after
    another would leave it. A row edited meanwhile is read again and folded into as it now is, for up to
    :data:`COLLAPSE_ROUNDS` rounds (each a compare-and-set and its retry). Returns, by row id, what the
    writers of each row it could not fold into are told: :class:`MemoryNotFound` for a row deleted meanwhile,
    :class:`VersionConflict` for one still being edited."""
    into: dict[str, list[tuple[Memory, float]]] = {}
    rows: dict[str, Memory] = {}
    for existing, incoming, score in merges:
        into.setdefault(existing["id"], []).append((incoming, score))
        rows.setdefault(existing["id"], existing)
    half_life = store.settings.importance_half_life_days

    def change(row: Memory) -> dict[str, Any]:
        now = utcnow()
        folded = dict(row)
        for incoming, score in into[row["id"]]:
            # scored on the row as the collapse read it (the previous fold), as one collapse at a time would
            importance, factors = importance_of(folded, now=now, half_life_days=half_life)
            meta = loads_metadata(folded)
            match = {"match_id": incoming["id"], "content": incoming["content"], "score": round(score, 6)}
            meta.setdefault("duplicate_matches", []).append({**match, "at": now.isoformat()})
            folded["metadata"] = dumps_metadata(meta)
            folded["reinforcement_count"] = int(folded["reinforcement_count"] or 0) + 1
            folded["confidence"] = reinforce(confidence_of(folded))
            folded["tags"] = sorted(set(folded["tags"] or []) | set(incoming["tags"] or []))
            folded["importance"], folded["importance_factors"] = importance, factors
        return {k: folded[k] for k in _COLLAPSED} | {"version": row["version"]}

    pending, missed = list(rows.values()), list(rows)
    for _ in range(COLLAPSE_ROUNDS):
        result = store.cas_write(
            [change(r) for r in pending],
            recompute=lambda fresh: [change(r) for r in fresh],
            actor=actor,
            action="dedup",
        )
        missed = list(result.skipped_concurrent_edit)
        pending = store.get_many(missed) if missed else []
        if not pending:
            break
    current = {r["id"]: int(r["version"]) for r in pending}
    return {
        i: VersionConflict(i, expected=int(rows[i]["version"]), current=current[i])
        if i in current
        else MemoryNotFound(i)
        for i in missed
    }


COLLAPSE_ROUNDS = 4  # rounds a collapse gives the concurrent edits of its row before its writers hear a conflict
# The columns a collapse changes (with ``id`` and the ``version`` it was decided on).
_COLLAPSED = ("id", "metadata", "importance", "importance_factors", "reinforcement_count", "confidence", "tags")
