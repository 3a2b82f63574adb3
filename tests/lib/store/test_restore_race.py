"""Restores racing each other or a write of the same content, in real processes released together: one row per
id and one per content whatever the order, and a restore that loses is told so and leaves the row as the
winner wrote it (issue 35: both restores of a deleted row were acknowledged and the id then held two rows)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from engram_pipeline.store import MemoryStore, RestoreDuplicate
from engram_pipeline.store.core import ShardedEngine
from tests.lib.store_procs import fork_worker

pytestmark = pytest.mark.integration
ROWS = 30
CONTENTS = [f"deleted fact {i}: the {('red', 'blue', 'green')[i % 3]} backup runs at {i} pm" for i in range(ROWS)]


def deleted_rows(store: MemoryStore) -> dict[str, dict]:
    """``ROWS`` memories, each deleted (audited): their pre-images by id, in the order written."""
    store.remember("a", "a memory that stays, so the table exists")
    rows = {}
    for content in CONTENTS:
        row = store.remember("a", content, tags=["t"]).memory
        store.delete(row["id"])
        rows[row["id"]] = row
    return rows


def race(store_uri: str, tmp_path: Path, *workers: tuple[str, ...]) -> list[list]:
    """Run each worker (``COMMAND ARGS...`` of store_procs) in its own process, released together."""
    go = tmp_path / "go"
    outs = [tmp_path / f"w{k}.json" for k in range(len(workers))]
    procs = [
        fork_worker(command, store_uri, *args, env={"ENGRAM_TEST_GO": str(go), "ENGRAM_TEST_OUT": str(out)})
        for (command, *args), out in zip(workers, outs, strict=True)
    ]
    go.touch()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    return [json.loads(out.read_text()) for out in outs]


def restores_of(store: MemoryStore, memory_id: str) -> int:
    return sum(e["action"] == "restore" for e in store.audit_events(memory_id))


def test_two_restores_of_each_deleted_row_restore_it_once(store: MemoryStore, store_uri: str, tmp_path: Path) -> None:
    rows = deleted_rows(store)
    ids = list(rows)
    first, second = race(store_uri, tmp_path, ("restore", *ids), ("restore", *ids))
    per_id = Counter(store.engine.scan("a", columns=["id"])["id"].to_pylist())
    assert [i for i in ids if per_id[i] != 1] == []  # was 20 of 30 held by two rows
    for k, memory_id in enumerate(ids):
        told = Counter((first[k], second[k]))
        assert told["restored"] == 1 and set(told) <= {"restored", "nothing", "conflict"}, (memory_id, told)
        assert restores_of(store, memory_id) == 1  # the loser recorded nothing
        back = store.get(memory_id, track_access=False)
        assert (back["content"], back["tags"], back["version"]) == (rows[memory_id]["content"], ["t"], 2)


def test_a_restore_racing_a_write_of_its_content_leaves_one_row(
    store: MemoryStore, store_uri: str, tmp_path: Path
) -> None:
    rows = deleted_rows(store)
    ids = list(rows)
    restored, remembered = race(store_uri, tmp_path, ("restore", *ids), ("remember", "a", *CONTENTS))
    stored = store.engine.scan("a", columns=["id", "content"]).to_pylist()
    per_content = Counter(r["content"] for r in stored)
    assert [c for c in CONTENTS if per_content[c] != 1] == []
    assert max(Counter(r["id"] for r in stored).values()) == 1
    stays = {r["content"]: r["id"] for r in stored}
    for k, memory_id in enumerate(ids):
        winner = stays[CONTENTS[k]]
        assert remembered[k]["id"] == winner  # the writer is told the row that stayed
        if restored[k] == "restored":
            assert winner == memory_id and remembered[k]["outcome"] == "exact_duplicate"
        else:  # the write came first: the restore is refused and restores nothing
            assert restored[k] == "duplicate" and winner != memory_id, restored[k]
            assert restores_of(store, memory_id) == 0


def test_restoring_a_row_whose_content_was_written_again_is_refused(store: MemoryStore) -> None:
    old = store.remember("a", "The staging DB is on port 5433").memory
    store.delete(old["id"])
    new = store.remember("a", "The staging DB is on port 5433").memory
    versions = store.engine.table_versions()
    with pytest.raises(RestoreDuplicate) as refused:
        store.restore(old["id"])
    assert refused.value.existing_id == new["id"] and new["id"] in str(refused.value)
    assert store.engine.table_versions() == versions  # nothing written
    assert [r["id"] for r in store.engine.scan("a", columns=["id"]).to_pylist()] == [new["id"]]
    store.delete(new["id"])
    assert store.restore(old["id"])["id"] == old["id"]  # the way back the message names


class WriteAfterCheck(ShardedEngine):
    """Stages the race deterministically: another writer (a second handle on the store) remembers ``content``
    right after restore's read found no row holding it, before restore's insert."""

    content: str | None = None

    def _by_hash(self, agent_id: str, digest: str) -> dict | None:
        found = super()._by_hash(agent_id, digest)
        if self.content is not None:
            content, self.content = self.content, None
            MemoryStore.open(self.uri, settings=self.settings).remember(agent_id, content)
        return found


def test_a_write_between_the_check_and_the_insert_withdraws_the_restore(store_uri: str, settings) -> None:
    store = MemoryStore(WriteAfterCheck.open(store_uri, settings=settings))
    old = store.remember("a", "The VPN profile expires in June").memory
    store.delete(old["id"])
    store.engine.content = old["content"]
    with pytest.raises(RestoreDuplicate) as refused:
        store.restore(old["id"])
    [row] = store.engine.scan("a", columns=["id", "content"]).to_pylist()
    assert row["id"] == refused.value.existing_id != old["id"]
    assert restores_of(store, old["id"]) == 0
