"""Edits of single memories: versioned update, delete, restore from the audit pre-image, access bookkeeping.

Verbs of :class:`~engram_pipeline.store.core.ShardedEngine` (bound there), each a function of the store; every
write goes through the compare-and-set. They call :func:`~engram_pipeline.store.cas.cas_write` itself, not the
store's overridable method: a subclass that hooks its passes' ``cas_write`` (as tests do, to stage a
concurrent edit) must not re-enter through ``update``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Unpack

from engram_pipeline.model import (
    Memory,
    MemoryChanges,
    dumps_metadata,
    loads_metadata,
    rows_to_table,
    utcnow,
)
from engram_pipeline.store import validation as v
from engram_pipeline.store.audit import REMOVING_ACTIONS
from engram_pipeline.store.cas import cas_write as _cas_write
from engram_pipeline.store.errors import (
    InvalidInput,
    NothingToRestore,
    RestoreConflict,
    RestoreDuplicate,
    VersionConflict,
)
from engram_pipeline.store.results import Change
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.sql import at_versions, lit

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine


UPDATABLE = frozenset(MemoryChanges.__annotations__)  # the record's (model.MemoryChanges)


def _conflict(store: Engine, memory_id: str, expected: int) -> VersionConflict:
    """The conflict a lost compare-and-set reports, with the version the row is at now (None: gone)."""
    now = store.get_many([memory_id], columns=["id", "version"])
    return VersionConflict(memory_id, expected=expected, current=now[0]["version"] if now else None)


def update(
    store: Engine,
    memory_id: str,
    *,
    expected_version: int,
    actor: str = "library",
    agent_id: str | None = None,
    **changes: Unpack[MemoryChanges],
) -> Memory:
    """Change fields of one memory if it is still at ``expected_version``; raises :class:`VersionConflict`.

    Changing ``content`` re-embeds and re-hashes it. Updatable: ``content``, ``tags``, ``importance``,
    ``confidence``, ``pinned``, ``kind``, ``tier``, ``outcome``, ``source``, ``metadata`` (a dict).
    """
    unknown = set(changes) - UPDATABLE
    if unknown:
        raise InvalidInput(f"cannot update {', '.join(sorted(unknown))}; updatable: {', '.join(sorted(UPDATABLE))}")
    if not changes:
        raise InvalidInput("nothing to update")
    v.check_version("expected_version", expected_version)
    if "metadata" in changes:
        changes["metadata"] = v.check_metadata(changes["metadata"])
    if "pinned" in changes:
        changes["pinned"] = v.check_bool("pinned", changes["pinned"])
    current = store.get(memory_id, agent_id=agent_id, track_access=False)
    if current["version"] != expected_version:
        raise VersionConflict(memory_id, expected=expected_version, current=current["version"])
    merged: Memory = {**current, **changes}
    probe = store.new_row(
        current["agent_id"],
        merged["content"],
        tier=merged["tier"],
        kind=merged["kind"],
        tags=merged["tags"] or [],
        source=merged["source"] or "agent",
        outcome=merged["outcome"],
        importance=changes.get("importance"),
        confidence=changes.get("confidence"),
    )
    change: Change = {"id": memory_id, "version": expected_version}
    change.update(changes)
    if "metadata" in changes:
        change["metadata"] = dumps_metadata(changes["metadata"])
    if "tags" in changes:
        change["tags"] = probe["tags"]
    if "content" in changes:
        change["content_hash"] = probe["content_hash"]
        change["vector"] = store._vector_for(changes["content"], None)
        # how much the new text says replaces what the old one said; the other factors wait for the next pass
        factors = {**json.loads(current["importance_factors"] or "{}"), **json.loads(probe["importance_factors"])}
        change["importance_factors"] = json.dumps(factors)
    result = _cas_write(store, [change], actor=actor, action="update")
    if not result.applied:
        raise _conflict(store, memory_id, expected_version)
    after = store.get(memory_id, track_access=False)
    store.record_audit(
        [
            {
                "memory_id": memory_id,
                "agent_id": after["agent_id"],
                "action": "update",
                "before": current,
                "after": after,
            }
        ],
        actor=actor,
    )
    return after


def delete(store: Engine, memory_id: str, *, expected_version: int | None = None, actor: str = "library") -> None:
    """Delete one memory (audited with its full pre-image, so ``restore`` can bring it back)."""
    expected_version = None if expected_version is None else v.check_version("expected_version", expected_version)
    current = store.get(memory_id, track_access=False)
    expected = current["version"] if expected_version is None else expected_version
    result = store.cas_delete({memory_id: expected}, actor=actor, action="delete")
    if not result.applied:
        raise _conflict(store, memory_id, expected)


def restore(store: Engine, memory_id: str, *, expected_version: int | None = None, actor: str = "library") -> Memory:
    """Bring back a pruned, merged, superseded, archived or deleted row from its audit pre-image.

    The row returns with its original id and every field of the pre-image; its ``version`` moves on
    from the current one (versions never go backwards). Restore is a compare-and-set like every edit:

    * if the row changed after the event that hid it (an edit, a re-score, another pass: its version is
      beyond the one that event wrote), restoring would silently revert that change, so it is refused
      with :class:`RestoreConflict` unless ``expected_version`` is the version it is at now (the caller
      read the current row and chooses the pre-image over it);
    * a given ``expected_version`` must be the current version, else :class:`VersionConflict`;
    * a row that is gone (pruned, deleted) has no current version: it is inserted back as it was
      (:func:`_insert_back`), once whatever races, and not beside a row holding its content again.

    Of two restores of one row at once, one restores it and the other is refused (:class:`NothingToRestore`
    or :class:`VersionConflict`) and changes nothing.

    Restoring a merged member also removes its ``duplicate-of`` link and its entry in the canonical's
    ``merged_from`` (the canonical keeps the tags it took in the merge).
    """
    if expected_version is not None:
        expected_version = v.check_version("expected_version", expected_version)
    found = store.last_pre_image(memory_id)
    if found is None:
        raise NothingToRestore(memory_id)
    image, event = found
    if any(e["action"] == "restore" and e["at"] >= event["at"] for e in store.audit_events(memory_id)):
        raise _already_restored(memory_id, event["action"])
    current = store.get_many([memory_id])
    if current and event["action"] in REMOVING_ACTIONS:
        # Removed, and here again: a racing restore put it back and has not recorded its event yet.
        raise _already_restored(memory_id, event["action"])
    if current:
        row = current[0]
        now, hidden_at = int(row["version"]), int(image["version"]) + 1
        if expected_version is not None and expected_version != now:
            raise VersionConflict(memory_id, expected=expected_version, current=now)
        if expected_version is None and now != hidden_at:
            raise RestoreConflict(memory_id, action=event["action"], hidden_at=hidden_at, current=now)
        change = {k: x for k, x in image.items() if k not in ("id", "version", "write_token", "updated_at")}
        change.update(id=memory_id, version=now)
        result = _cas_write(store, [change], actor=actor, action="restore")
        if not result.applied:
            raise _conflict(store, memory_id, now)
        before: Memory | None = row
    else:
        _insert_back(store, image, event["action"])
        before = None
    after = store.get(memory_id, track_access=False)
    store.record_audit(
        [
            {
                "memory_id": memory_id,
                "agent_id": after["agent_id"],
                "action": "restore",
                "before": before,
                "after": after,
            }
        ],
        actor=actor,
    )
    if event["action"] == "merge" and before is not None:
        canonical = loads_metadata(before).get("merged", {}).get("into") or before["superseded_by"]
        if canonical:
            _unmerge(store, before["agent_id"], memory_id, canonical, actor=actor)
    return after


def _insert_back(store: Engine, image: Memory, action: str) -> None:
    """Insert a removed row back from its pre-image, or raise why not (nothing inserted, or withdrawn).

    One row per id by construction: the insert is a ``merge_insert`` on ``id``, the table's primary key
    (:data:`~engram_pipeline.store.shards.PRIMARY_KEY`), so of two racing restores the second inserts
    nothing and hears :class:`NothingToRestore`. One row per content as for any write (exact dedup): a row
    holding the content again (remembered after the delete) refuses the restore with
    :class:`RestoreDuplicate`; one committed by a writer racing the insert is settled after it as racing
    writers are (the row committed first stays: :meth:`ShardedEngine._drop_lost_races`, which withdraws
    this row, audited, when it came second).
    """
    memory_id, agent_id, digest = image["id"], image["agent_id"], image["content_hash"]
    there = store._by_hash(agent_id, digest)
    if there is not None:
        if there["id"] == memory_id:
            raise _already_restored(memory_id, action)
        raise RestoreDuplicate(memory_id, existing_id=there["id"])
    restored = {**image, "version": image["version"] + 1}
    table = rows_to_table([restored], store.memory_schema)
    memories = store.shard_for(agent_id).memories
    result = with_retry(lambda: memories.merge_insert("id").when_not_matched_insert_all().execute(table))
    if not result.num_inserted_rows:  # a racing restore's insert committed first
        raise _already_restored(memory_id, action)
    if memory_id not in store._drop_lost_races([restored]):
        stays = store._by_hash(agent_id, digest)
        if stays is None:  # and the row that won was deleted since
            raise NothingToRestore(memory_id, reason="a write of the same content came first")
        raise RestoreDuplicate(memory_id, existing_id=stays["id"])


def _already_restored(memory_id: str, action: str) -> NothingToRestore:
    return NothingToRestore(memory_id, reason=f"it was already restored after its {action}")


def _unmerge(store: Engine, agent_id: str, member_id: str, canonical_id: str, *, actor: str) -> None:
    """Undo what a merge wrote outside the member: its ``duplicate-of`` link and the canonical's
    ``merged_from`` entry (a compare-and-set on the canonical, audited, re-read once on a miss)."""
    store.drop_links(agent_id, src_id=member_id, dst_id=canonical_id, rel="duplicate-of")

    def change(row: Memory) -> list[Change]:
        meta = loads_metadata(row)
        entries = meta.get("merged_from", [])
        keep = [e for e in entries if e.get("id") != member_id]
        if len(keep) == len(entries):
            return []
        if keep:
            meta["merged_from"] = keep
        else:
            meta.pop("merged_from")
        return [{"id": row["id"], "version": row["version"], "metadata": dumps_metadata(meta)}]

    rows = store.get_many([canonical_id])
    if rows:
        _cas_write(
            store,
            change(rows[0]),
            recompute=lambda fresh: [c for r in fresh for c in change(r)],
            actor=actor,
            action="unmerge",
            audit=True,
        )


def record_access(
    store: Engine,
    rows: Sequence[Memory],
    *,
    times: int = 1,
    at: datetime | None = None,
    shard: int | None = None,
) -> int:
    """Access bookkeeping: +``times`` accesses and ``last_accessed_at`` for rows still at the version read.

    One commit for all rows (per shard they are in: ``shard`` if the caller knows it, else their
    ``agent_id``'s, else looked up); it never bumps ``version`` (it is not an edit), and a row whose version
    moved meanwhile is left alone. ``times``/``at`` let the access-log fold apply many reads in one commit.
    Returns the number of rows updated. Readers log their reads (:meth:`log_access`) rather than call this.
    """
    if not rows:
        return 0
    versions = {r["id"]: int(r["version"]) for r in rows}
    if shard is not None:
        where = {shard: list(versions)}
    elif all(r.get("agent_id") for r in rows):
        where = {}
        for r in rows:
            where.setdefault(store.shard_of(r["agent_id"]), []).append(r["id"])
    else:
        where = store.locate(list(versions))
    now = at or utcnow()
    values = {"access_count": f"access_count + {int(times)}", "last_accessed_at": _ts_sql(now)}
    updated = 0
    for k, ids in where.items():
        memories = store.shards[k].memories
        cond = at_versions({i: versions[i] for i in ids})
        result = with_retry(lambda: memories.update(where=cond, values_sql=values))  # noqa: B023 (called at once)
        updated += int(result.rows_updated)
    return updated


def _ts_sql(ts: datetime) -> str:
    return f"arrow_cast({lit(ts.isoformat())}, 'Timestamp(Microsecond, Some(\"UTC\"))')"
