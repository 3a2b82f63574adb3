"""Which shard an agent's rows live in: a stable hash of ``agent_id``, the same in every process and release.

Python's ``hash`` is salted per process, so the shard is the first 8 bytes of the agent id's BLAKE2b digest,
modulo the store's shard count. Changing this function moves agents between shards: it is part of the on-disk
format (``engram migrate --shards N`` is how a store changes its shard count).

>>> shard_of("alice", 1)
0
>>> [shard_of("alice", 8), shard_of("alice", 8)] == [shard_of("alice", 8)] * 2
True
>>> sorted({shard_of(f"agent-{i}", 4) for i in range(100)})
[0, 1, 2, 3]

A sweep over several agents of one shard keys its cursor and lease by the shard's scope name,
``shard/<k>-of-<n>`` (:func:`shard_scope`); no agent id holds a ``/``, and a scope routes to its own shard, so a
sweep's bookkeeping commits to the tables of the shard it sweeps:

>>> shard_of(shard_scope(3, 8), 8)
3
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

SCOPE_PREFIX = "shard/"


def shard_scope(shard: int, shards: int) -> str:
    """The cursor key of a sweep over agents of shard ``shard`` of ``shards`` (the count is in the name, so a
    re-sharded store never reads an old layout's sweep cursor)."""
    return f"{SCOPE_PREFIX}{shard}-of-{shards}"


def is_shard_scope(key: str) -> bool:
    return key.startswith(SCOPE_PREFIX)


def shard_of(agent_id: str, shards: int) -> int:
    """The shard (``0 <= shard < shards``) of ``agent_id`` (or of a :func:`shard_scope`) in a store of
    ``shards`` shards."""
    if shards < 1:
        raise ValueError(f"a store has at least one shard, not {shards}")
    if is_shard_scope(agent_id):
        shard, _, count = agent_id.removeprefix(SCOPE_PREFIX).partition("-of-")
        if int(count) != shards or not 0 <= int(shard) < shards:
            raise ValueError(f"{agent_id!r} names a shard of a {count}-shard layout, not of {shards} shards")
        return int(shard)
    digest = hashlib.blake2b(agent_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def by_shard(agent_ids: Iterable[str], shards: int) -> dict[int, list[str]]:
    """``agent_ids`` grouped by shard (each group sorted, shards in order)."""
    out: dict[int, list[str]] = {}
    for agent_id in sorted(set(agent_ids)):
        out.setdefault(shard_of(agent_id, shards), []).append(agent_id)
    return dict(sorted(out.items()))
