"""Importance decay: thresholds and statuses, prune with audit and restore, idempotence, concurrent edits
(a real second writer between read and write), and resume after a kill."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.core import ShardedEngine
from tests.constants import SEED_POLICY

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


@pytest.fixture
def settings() -> Settings:
    """These tests exercise pruning by score and age: the `seed` retention policy (see test_retention.py for
    the default, which prunes only what a canonical holds)."""
    return Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **SEED_POLICY})


def add(store: MemoryStore, content: str, *, days: float, pinned: bool = False, access: int = 0) -> dict[str, Any]:
    """Insert one LTM row created ``days`` before NOW, bypassing write-time checks (tests pick the content)."""
    row = store.engine.new_row("a", content, tier="ltm", pinned=pinned, created_at=NOW - timedelta(days=days),
                        access_count=access)
    row["vector"] = store.engine.embed([content])[0].tolist()
    assert store.engine.insert_rows([row]) == [row["id"]]
    return row


def set_cols(store: MemoryStore, row_id: str, **values: Any) -> None:
    cur = store.get(row_id, track_access=False)
    changed = store.engine.cas_write([{"id": row_id, "version": cur["version"], **values}], actor="test", action="t")
    assert changed.applied


def by_id(store: MemoryStore) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in store.list_memories("a")}


def test_thresholds_and_statuses(store: MemoryStore) -> None:
    fresh = add(store, "We decided to use Postgres", days=0.5)
    faded = add(store, "the printer on floor two", days=10)
    gone = add(store, "lunch menu of some monday", days=90)
    pinned = add(store, "the door code is 4711", days=400, pinned=True)
    revived = add(store, "release train leaves on thursday", days=0.2)
    set_cols(store, revived["id"], status="stale")
    flagged = add(store, "the wiki lives on confluence", days=10)
    set_cols(store, flagged["id"], status="contradicted")
    hidden = add(store, "standup is at nine", days=10)
    set_cols(store, hidden["id"], status="superseded", superseded_by=fresh["id"])

    report = decay_importance(store, "a", now=NOW)
    rows = by_id(store)
    assert report.processed == 7 and report.pruned == 1 and gone["id"] not in rows
    assert rows[fresh["id"]]["status"] == "active" and rows[fresh["id"]]["importance"] > 0.3
    assert rows[faded["id"]]["status"] == "stale" and rows[faded["id"]]["importance"] <= 0.3
    assert rows[pinned["id"]]["status"] == "active" and rows[pinned["id"]]["importance"] >= 0.9
    assert rows[revived["id"]]["status"] == "active"
    assert rows[flagged["id"]]["status"] == "contradicted"  # scored, but not re-statused
    assert rows[hidden["id"]]["status"] == "superseded" and rows[hidden["id"]]["superseded_by"] == fresh["id"]
    assert report.stale == 1  # faded (flagged and hidden keep their status)
    assert report.updated == 6
    assert json.loads(rows[faded["id"]]["importance_factors"])["scored_at"] == NOW.isoformat()
    assert rows[faded["id"]]["decayed_at"] is None  # confidence decay's reference time, not touched here
    assert [h.memory["id"] for h in store.recall("a", "printer floor two", k=10)].count(faded["id"]) == 1


def test_prune_is_audited_and_restorable(store: MemoryStore) -> None:
    gone = add(store, "an old note about nothing", days=60)
    before = store.get(gone["id"], track_access=False)
    assert decay_importance(store, "a", now=NOW).pruned == 1
    events = store.audit_events(gone["id"])
    assert [(e["actor"], e["action"]) for e in events] == [("ltm_decay", "prune")]
    after = store.restore(gone["id"])
    skip = {"version", "updated_at", "write_token"}
    assert {k: v for k, v in after.items() if k not in skip} == {k: v for k, v in before.items() if k not in skip}


def test_pinned_row_is_never_pruned(store: MemoryStore) -> None:
    row = add(store, "an ancient pinned fact", days=3000, pinned=True)
    decay_importance(store, "a", now=NOW)
    assert store.get(row["id"], track_access=False)["importance"] >= 0.9


def test_second_run_at_same_now_writes_nothing(store: MemoryStore) -> None:
    for i, days in enumerate((0.1, 2, 9, 45, 80)):
        add(store, f"note {i} about topic {'xyz'[i % 3]}", days=days)
    decay_importance(store, "a", now=NOW)
    version = store.engine.memories.version
    again = decay_importance(store, "a", now=NOW)
    assert (again.updated, again.pruned, again.stale) == (0, 0, 0)
    assert store.engine.memories.version == version


class EditingStore(ShardedEngine):
    """A second writer that edits rows through the public API after the pass read them, before it commits:
    ``once`` rows are edited before the first attempt, ``twice`` rows again before the retry (the pass's next
    compare-and-set, which writes what it re-decided from the re-read rows)."""

    once: Sequence[str] = ()
    twice: Sequence[str] = ()
    again: Sequence[str] = ()

    def cas_write(self, changes: Sequence[dict[str, Any]], *, recompute: Any = None, **kw: Any) -> Any:
        if kw.get("actor") != "ltm_decay" or not (self.once or self.twice or self.again):
            return super().cas_write(changes, recompute=recompute, **kw)
        if self.again:  # the retry
            again, self.again = self.again, ()
            self._edit_again(again)
            return super().cas_write(changes, recompute=recompute, **kw)
        once, twice, self.once, self.twice, self.again = self.once, self.twice, (), (), self.twice
        for rid in [*once, *twice]:
            self.update(rid, expected_version=self.get(rid, track_access=False)["version"], pinned=True)
        return super().cas_write(changes, recompute=recompute, **kw)

    def _edit_again(self, ids: Sequence[str]) -> None:
        for rid in ids:
            cur = self.get(rid, track_access=False)
            self.update(rid, expected_version=cur["version"], tags=["edited-again"])


def test_concurrent_edit_is_recomputed_or_skipped(store_uri: str, settings: Settings) -> None:
    store = MemoryStore(EditingStore.open(store_uri, settings=settings))
    a = add(store, "the build box is in rack four", days=10)
    b = add(store, "the vpn profile expires in june", days=10)
    c = add(store, "the coffee machine needs descaling", days=10)
    store.engine.once, store.engine.twice = (a["id"],), (b["id"],)
    report = decay_importance(store, "a", now=NOW)
    rows = by_id(store)
    assert report.skipped_concurrent_edit == 1 and report.updated == 2
    assert rows[a["id"]]["pinned"] and rows[a["id"]]["importance"] >= 0.9  # re-scored from the fresh row
    assert rows[b["id"]]["tags"] == ["edited-again"] and rows[b["id"]]["decayed_at"] is None  # left alone
    assert rows[c["id"]]["status"] == "stale"


class CrashingStore(ShardedEngine):
    """Dies (like a killed worker) at its ``crash_at``-th compare-and-set of the decay pass."""

    crash_at = 0
    calls = 0

    def cas_write(self, changes: Any, **kw: Any) -> Any:
        if kw.get("actor") == "ltm_decay":
            self.calls += 1
            if self.calls == self.crash_at:
                raise RuntimeError("killed")
        return super().cas_write(changes, **kw)


def test_resume_after_kill_equals_uninterrupted_run(store_uri: str, settings: Settings, tmp_path: Path) -> None:
    store = MemoryStore(CrashingStore.open(store_uri, settings=settings))
    for i, days in enumerate((0.1, 3, 8, 40, 70, 1, 20, 90)):
        add(store, f"memo {i} on subject {'pqrs'[i % 4]}", days=days, access=i % 3)
    twin_uri = str(tmp_path / "twin")
    shutil.copytree(store_uri, twin_uri)
    store.engine.crash_at = 2
    with pytest.raises(RuntimeError, match="killed"):
        decay_importance(store, "a", now=NOW, batch_size=3)
    resumed = decay_importance(MemoryStore.open(store_uri, settings=settings), "a", batch_size=3)
    # rows the killed batch pruned before dying are gone, so they are not processed again
    assert resumed.cursor["resumed"] == 1 and 6 <= resumed.processed <= 8
    twin = MemoryStore.open(twin_uri, settings=settings)
    decay_importance(twin, "a", now=NOW, batch_size=3)
    cols = ("importance", "importance_factors", "status", "decayed_at", "pinned", "content")
    left, right = by_id(MemoryStore.open(store_uri, settings=settings)), by_id(twin)
    assert left.keys() == right.keys()
    for rid in left:
        assert {c: left[rid][c] for c in cols} == {c: right[rid][c] for c in cols}


ages = st.lists(st.tuples(st.floats(0, 120), st.booleans(), st.integers(0, 20)), min_size=1, max_size=8)


@hsettings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=ages, later=st.floats(0, 30))
def test_property_second_pass_changes_nothing(settings: Settings, rows: list[Any], later: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(tmp, settings=settings)
        for i, (days, pinned, access) in enumerate(rows):
            add(store, f"fact {i} concerning area {i * 7}", days=days, pinned=pinned, access=access)
        when = NOW + timedelta(days=later)
        decay_importance(store, "a", now=when)
        snapshot, version = by_id(store), store.engine.memories.version
        again = decay_importance(store, "a", now=when)
        assert (again.updated, again.pruned, again.skipped_concurrent_edit) == (0, 0, 0)
        assert store.engine.memories.version == version and by_id(store) == snapshot
