"""The batched compare-and-set every writer goes through.

One call applies a batch of row changes in **one** LanceDB commit (a ``merge_insert`` whose match condition is
``target.version + 1 = source.version``), learns exactly which rows it applied by reading its own commit's
table version for its write token, re-reads the misses and lets the caller recompute them once, then reports
the rest as ``skipped_concurrent_edit``. Only the columns named in the changes are written (plus ``version``,
``updated_at`` and ``write_token``): a pass that rescores importance never rewrites vectors or content, and
never overwrites access bookkeeping done by a reader in the meantime.

A change is a dict with ``id``, ``version`` (the version the caller read) and the new column values; every
change in one batch names the same columns.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from engram_pipeline.model import Memory, utcnow
from engram_pipeline.store.results import CasResult, Change, Recompute
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.sql import at_versions

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine


_FIXED = ("id", "version", "updated_at", "write_token")


def cas_write(
    store: Engine,
    changes: Sequence[Change],
    *,
    recompute: Recompute | None = None,
    actor: str,
    action: str,
    run_id: str | None = None,
    audit: bool = False,
) -> CasResult:
    """Apply ``changes`` where each row is still at the version the caller read; see the module docstring.

    With ``audit=True`` every applied row gets an audit event carrying its full pre-image (needed for any
    change that can take a row out of recall, so that ``restore`` can bring it back).
    """
    if not changes:
        return CasResult((), ())
    audit_as = (actor, action, run_id) if audit else None
    applied, misses, pre, commits = _attempt(store, list(changes), audit_as)
    unchanged: list[str] = []
    skipped: list[str] = []
    if misses and recompute is not None:
        fresh = store.get_many(misses)
        retry = recompute(fresh)
        retried = {c["id"] for c in retry}
        unchanged = [r["id"] for r in fresh if r["id"] not in retried]
        gone = set(misses) - {r["id"] for r in fresh}
        skipped.extend(sorted(gone))
        if retry:
            again, misses2, pre2, c2 = _attempt(store, retry, audit_as)
            applied += again
            pre += pre2
            commits += c2
            skipped.extend(misses2)
    else:
        skipped.extend(misses)
    return CasResult(tuple(applied), tuple(skipped), tuple(unchanged), commits, tuple(pre))


def _attempt(
    store: Engine, changes: list[Change], audit: tuple[str, str, str | None] | None
) -> tuple[list[str], list[str], list[Memory], int]:
    """One commit of ``changes``; ``audit`` = (actor, action, run_id) writes the pre-images ahead of it."""
    ids = [c["id"] for c in changes]
    if len(set(ids)) != len(ids):
        raise ValueError("a compare-and-set batch names the same memory twice")
    columns = sorted(set().union(*(c.keys() for c in changes)) - set(_FIXED))
    pre_by_id: dict[str, Memory] = {}
    event_ids: dict[str, str] = {}
    if audit is not None:
        # A pre-image read at the expected version is exact: versions only grow, so if the commit below
        # applies, the row was still at this version, and thus had this content.
        pre_by_id = {r["id"]: r for r in store.get_many(ids)}
        expected = {c["id"]: c["version"] for c in changes}
        stale = [i for i in ids if i not in pre_by_id or pre_by_id[i]["version"] != expected[i]]
        if stale:
            keep = [c for c in changes if c["id"] not in set(stale)]
            done, misses, pre, commits = _attempt(store, keep, audit) if keep else ([], [], [], 0)
            return done, misses + stale, pre, commits
        # Write-ahead, as in cas_delete: a process killed between the two commits leaves an event, never a
        # hidden row without its pre-image; events of rows the commit did not apply are dropped after it.
        actor, action, run_id = audit
        event_ids = {c["id"]: _event_id(run_id, action, c["id"], int(c["version"])) for c in changes}
        _write_ahead(store, pre_by_id, event_ids, actor=actor, action=action, run_id=run_id)
    # One commit per shard the rows are in (a pre-image names its agent, so its shard; else a lookup).
    where: dict[int, list[str]] = {}
    if audit is not None:
        for i in ids:
            where.setdefault(store.shard_of(pre_by_id[i]["agent_id"]), []).append(i)
    else:
        where = store.locate(ids)
    token = uuid.uuid4().hex
    now = utcnow()
    by_id = {c["id"]: c for c in changes}
    applied: list[str] = []
    commits = 0
    for k, shard_ids in where.items():
        if shard_ids:
            applied += _commit(store, k, [by_id[i] for i in shard_ids], columns, token, now)
            commits += 1
    got = set(applied)
    applied = [i for i in ids if i in got]
    misses = [i for i in ids if i not in got]
    pre = [pre_by_id[i] for i in applied] if audit is not None else []
    if event_ids and misses:
        for k, shard_ids in where.items():
            dropped = [event_ids[i] for i in shard_ids if i not in got]
            if dropped:
                store.drop_audit(dropped, shard=k)
    return applied, misses, pre, commits


def _commit(store: Engine, shard: int, changes: list[Change], columns: list[str], token: str, now: Any) -> list[str]:
    """One conditional ``merge_insert`` of ``changes`` into ``shard``'s table; returns the ids it applied."""
    ids = [c["id"] for c in changes]
    schema = store.memory_schema
    fields = [schema.field(n) for n in (*_FIXED, *columns)]
    # Built column by column (not row dicts through ``from_pylist``): a decay batch is tens of thousands of rows.
    values: dict[str, list[Any]] = {
        "id": ids,
        "version": [int(c["version"]) + 1 for c in changes],
        "updated_at": [c.get("updated_at", now) for c in changes],
        "write_token": [token] * len(changes),
    }
    for name in columns:
        values[name] = [c.get(name) for c in changes]
    source = pa.Table.from_arrays([pa.array(values[f.name], type=f.type) for f in fields], schema=pa.schema(fields))
    memories = store.shards[shard].memories
    result = with_retry(
        lambda: (
            memories.merge_insert("id")
            .when_matched_update_all(where="target.version + 1 = source.version")
            # lancedb 0.40: the indexed join (once a BTree on id covers the rows, i.e. after ``maintain``)
            # panics on a conditional update from a partial-column source; the scan join is correct.
            .use_index(False)
            .execute(source)
        )
    )
    # When every row matched, the commit applied them all; otherwise ask the commit's own snapshot which.
    if result.num_updated_rows == len(changes):
        return ids
    return store.ids_written_at(result.version, ids, token, shard=shard)


def cas_delete(
    store: Engine, expected: dict[str, int], *, actor: str, action: str, run_id: str | None = None
) -> CasResult:
    """Delete rows still at their expected version, in one commit, auditing each full pre-image."""
    if not expected:
        return CasResult((), ())
    pre = {r["id"]: r for r in store.get_many(list(expected))}
    live = [i for i, v in expected.items() if i in pre and pre[i]["version"] == v]
    live_set = set(live)
    skipped = [i for i in expected if i not in live_set]
    if not live:
        return CasResult((), tuple(skipped))
    # Write-ahead: the pre-images go to the audit before the delete, so a process killed between the two
    # commits leaves an event, never a row gone without one. With a run id the event ids are deterministic,
    # so the resumed run (same run id) that deletes the row does not record it twice.
    event_ids = {i: _event_id(run_id, action, i, int(expected[i])) for i in live}
    _write_ahead(store, pre, event_ids, actor=actor, action=action, run_id=run_id)
    by_shard: dict[int, list[str]] = {}
    for i in live:
        by_shard.setdefault(store.shard_of(pre[i]["agent_id"]), []).append(i)
    applied: list[str] = []
    for k, shard_live in by_shard.items():
        mine = set(_delete(store, k, {i: expected[i] for i in shard_live}))
        applied += [i for i in shard_live if i in mine]
        lost = [event_ids[i] for i in shard_live if i not in mine]
        if lost:
            store.drop_audit(lost, shard=k)
    mine = set(applied)
    skipped += [i for i in live if i not in mine]
    applied = [i for i in live if i in mine]
    return CasResult(tuple(applied), tuple(skipped), (), len(by_shard), tuple(pre[i] for i in applied))


def _delete(store: Engine, shard: int, expected: dict[str, int]) -> list[str]:
    """Delete the rows of ``shard`` still at their ``expected`` version in one commit; returns those it removed."""
    live = list(expected)
    memories = store.shards[shard].memories
    result = with_retry(lambda: memories.delete(at_versions(expected)))
    # Ours are the rows this commit removed: present just before it and gone in it. (Absent now is not
    # enough: a concurrent delete of the same row would have both writers claim it and keep both events.)
    if getattr(result, "num_deleted_rows", None) == len(live):
        return live
    before = set(store.ids_at(result.version - 1, live, shard=shard))
    after = set(store.ids_at(result.version, live, shard=shard))
    return [i for i in live if i in before and i not in after]


def _write_ahead(
    store: Engine,
    pre: dict[str, Memory],
    event_ids: dict[str, str],
    *,
    actor: str,
    action: str,
    run_id: str | None,
) -> None:
    """Audit the pre-image of every row in ``event_ids`` before the commit that changes or deletes it."""
    events = [
        {"event_id": e, "memory_id": i, "agent_id": pre[i]["agent_id"], "action": action, "before": pre[i]}
        for i, e in event_ids.items()
    ]
    store.record_audit(events, actor=actor, run_id=run_id)


def _event_id(run_id: str | None, action: str, memory_id: str, version: int) -> str:
    """A deterministic audit event id within a run (idempotent write-ahead), a random one without a run."""
    if run_id is None:
        return uuid.uuid4().hex
    return hashlib.sha256(f"{run_id}\0{action}\0{memory_id}\0{version}".encode()).hexdigest()[:32]
