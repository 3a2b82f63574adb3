"""The store's own background compaction on object storage (Ceph RGW): it compacts and indexes through ``lance``
(store/write/compaction.py), which opens the table with the connection's storage options. A failed compaction is
only logged (it is a cost, never a correctness matter), so this checks that it ran: the compactions counted, the
fragments merged, every row still found through the indexes."""

from __future__ import annotations

import hashlib

import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.write import compaction as sc

pytestmark = [pytest.mark.distributed, pytest.mark.integration]


def test_the_background_compaction_runs_on_rgw(
    s3_uri: str, cluster_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sc, "MAX_FRAGMENTS", 4)
    monkeypatch.setattr(sc, "CHECK_EVERY", 1)
    monkeypatch.setattr(sc, "MERGE_SCALAR_SEGMENTS", 3)
    monkeypatch.setattr(sc, "INDEX_ROWS", 1)  # an index step after every compaction
    store = MemoryStore.open(s3_uri, settings=Settings.from_env(cluster_env))
    facts = [f"distinct fact {hashlib.sha1(str(i).encode()).hexdigest()[:10]} about the queue" for i in range(16)]
    ids = [store.remember("a", facts[0]).memory["id"]]
    store.maintain()  # the scalar indexes, whose delta segments the compaction adds and merges
    for fact in facts[1:]:
        ids.append(store.remember("a", fact).memory["id"])
        sc.wait_idle(store.engine, 120)
    assert sc.compactions(store.engine) >= 3
    assert sc.fragments(store.engine) < 4
    assert all(i.num_unindexed_rows < 4 for i in store.engine.memories.list_indices())
    assert [store.get(i, track_access=False)["content"] for i in ids] == facts
    assert all(store.remember("a", fact).outcome == "exact_duplicate" for fact in facts)
