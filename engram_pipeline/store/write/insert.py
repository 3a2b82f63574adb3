"""The insert of a batch's new rows (:func:`append_new`): one append per shard, a racing writer's row of the
same content caught after the fact, and the write cache moved along with the append (:mod:`.cache`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from engram_pipeline.model import Memory, rows_to_table
from engram_pipeline.store.retry import with_retry

if TYPE_CHECKING:
    from engram_pipeline.store.write.cache import Writer


def insert_new(store: Writer, rows: Sequence[Memory], *, checked_at: Mapping[int, int]) -> list[str]:
    """Append rows found new by an exact check that read version ``checked_at[k]`` (or later) of each shard
    ``k``'s table, in one commit per shard; returns the ids that stay (:func:`append_new`)."""
    kept = append_new(store, rows, checked_at=checked_at, whole=False)
    return [r["id"] for r in rows if r["id"] in kept]


def append_new(
    store: Writer, rows: Sequence[Memory], *, checked_at: Mapping[int, int], whole: bool = True
) -> dict[str, Memory | None]:
    """Append rows found new by an exact check that read version ``checked_at[k]`` (or later) of each shard
    ``k``'s table, in one commit per shard; returns the rows that stay, by id, each as a read of the table
    returns it (with ``whole``; else None).

    An append, not the ``merge_insert`` on ``content_hash`` of :meth:`ShardedEngine.insert_rows` (a join
    against the whole table, twice the time). A racing writer's row of the same content is caught after the
    fact, as ``insert_rows`` must anyway (lancedb does not detect racing inserts of one key): the row
    committed first stays, a later one is deleted, audited. When the append's commit is ``checked_at + 1``
    no commit came between the check and it, so no such row can exist and that second read is skipped.
    The rows as stored come from the Arrow table appended (the types a read returns), not from a read.
    """
    kept: dict[str, Memory | None] = {}
    for k, group in store._group(rows).items():
        table = rows_to_table(group, store.memory_schema)
        appends = store.shards[k].appends
        committed = with_retry(lambda: appends.append(table))  # noqa: B023 (called at once)
        stored: list[Memory | None] = table.to_pylist() if whole else [None] * len(group)
        if k in checked_at and appends.unchanged(checked_at[k], committed - 1):
            # nothing but commits that change no row (the store's own compactions) came since the check
            store.write_cache.appended(k, checked_at[k], committed, group, whole=stored)
            kept.update((r["id"], s) for r, s in zip(group, stored, strict=True))
        else:
            stays = set(store._drop_lost_races(group))
            kept.update((r["id"], s) for r, s in zip(group, stored, strict=True) if r["id"] in stays)
    return kept
