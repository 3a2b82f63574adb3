"""Identical content written by racing processes through ``MemoryStore.remember`` stays one row per agent,
whatever lancedb's ``merge_insert`` lets through, and every writer is told that row's id."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from engram_pipeline.store import MemoryStore
from tests.lib.store_procs import fork_worker

pytestmark = pytest.mark.integration
WRITERS = 4
CONTENTS = [
    f"shared fact {i}: the {('red', 'blue', 'green', 'amber')[i % 4]} queue drains at {i} am" for i in range(40)
]


def test_racing_writers_of_the_same_content_leave_one_row_each(
    store: MemoryStore, store_uri: str, tmp_path: Path
) -> None:
    store.remember("a", "an earlier memory so the table exists")
    go = tmp_path / "go"
    outs = [tmp_path / f"w{k}.json" for k in range(WRITERS)]
    procs = [
        fork_worker("remember", store_uri, "a", *CONTENTS, env={"ENGRAM_TEST_GO": str(go), "ENGRAM_TEST_OUT": str(o)})
        for o in outs
    ]
    go.touch()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    results = [json.loads(o.read_text()) for o in outs]
    rows = store.engine.scan("a", columns=["id", "content"]).to_pylist()
    per_content = Counter(r["content"] for r in rows)
    assert max(per_content.values()) == 1, [c for c, n in per_content.items() if n > 1]  # was 3-5 duplicates
    assert len(rows) == len(CONTENTS) + 1
    stored = {r["content"]: r["id"] for r in rows}
    for k, content in enumerate(CONTENTS):
        told = {results[w][k]["id"] for w in range(WRITERS)}
        assert told == {stored[content]}, content  # every writer got the row that stayed
        outcomes = Counter(results[w][k]["outcome"] for w in range(WRITERS))
        assert outcomes["created"] == 1 and set(outcomes) <= {"created", "exact_duplicate"}, outcomes
    collapsed = store.engine.audit_for_agent("a", actions=["dedup_collapse"]).to_pylist()
    assert all(e["before"] and e["memory_id"] not in stored.values() for e in collapsed)
