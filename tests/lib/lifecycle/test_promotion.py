"""STM to LTM promotion: thresholds, quota, collapse into an LTM duplicate, the audited expiry sweep,
idempotence, and a row promoted by someone else in between."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from engram_pipeline.lifecycle.promotion import promote_stm
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.core import ShardedEngine

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def add(
    store: MemoryStore,
    content: str,
    *,
    tier: str = "stm",
    access: int = 0,
    hours: float = 1,
    pinned: bool = False,
    vector: list[float] | None = None,
) -> dict[str, Any]:
    """Insert one row created ``hours`` before NOW (STM rows live one day), bypassing write-time checks."""
    row = store.engine.new_row("a", content, tier=tier, pinned=pinned, created_at=NOW - timedelta(hours=hours),
                        access_count=access, last_accessed_at=NOW - timedelta(minutes=5) if access else None)
    row["vector"] = vector if vector is not None else store.engine.embed([content])[0].tolist()
    assert store.engine.insert_rows([row]) == [row["id"]]
    return row


def test_promotes_by_access_and_importance(store: MemoryStore) -> None:
    good = add(store, "We decided to deploy on Fridays", access=5)
    rare = add(store, "We decided to rename the repo", access=1)
    dull = add(store, "the printer is on floor two", access=5)
    report = promote_stm(store, "a", now=NOW)
    assert (report.processed, report.promoted, report.skipped, report.expired) == (3, 1, 0, 0)
    row = store.get(good["id"], track_access=False)
    assert row["tier"] == "ltm" and row["expires_at"] is None and row["importance"] >= 0.5
    assert store.get(rare["id"], track_access=False)["tier"] == "stm"
    assert store.get(dull["id"], track_access=False)["tier"] == "stm"


def test_ltm_quota_promotes_best_first(store_uri: str, settings: Settings) -> None:
    store = MemoryStore.open(store_uri, settings=settings.replace(ltm_quota=2))
    add(store, "an existing long-term fact", tier="ltm")
    best = add(store, "We decided to ship: the release is completed", access=9)
    others = [add(store, f"We decided on option {c}", access=4) for c in "xy"]
    report = promote_stm(store, "a", now=NOW)
    assert (report.promoted, report.skipped) == (1, 2)
    assert store.get(best["id"], track_access=False)["tier"] == "ltm"
    assert all(store.get(o["id"], track_access=False)["tier"] == "stm" for o in others)


def test_duplicate_of_ltm_row_is_collapsed_and_restorable(store: MemoryStore) -> None:
    ltm = add(store, "We decided to use Postgres for events", tier="ltm")
    stm = add(store, "Decision made: Postgres is the event store", access=6, vector=ltm["vector"])
    report = promote_stm(store, "a", now=NOW)
    assert (report.promoted, report.skipped) == (0, 1)
    row = store.get(stm["id"], track_access=False)
    assert row["tier"] == "stm" and row["status"] == "superseded" and row["superseded_by"] == ltm["id"]
    assert [(x["src_id"], x["rel"]) for x in store.engine.links_of([stm["id"]])] == [(stm["id"], "duplicate-of")]
    restored = store.restore(stm["id"])
    assert restored["status"] == "active" and restored["superseded_by"] is None


def test_expired_rows_are_swept_with_audit(store: MemoryStore) -> None:
    old = add(store, "the meeting is in room 4 today", hours=30)
    kept = add(store, "the wifi password today is hunter2", hours=30, pinned=True)
    live = add(store, "lunch at noon today", hours=2)
    report = promote_stm(store, "a", now=NOW)
    assert report.expired == 1
    assert sorted(r["id"] for r in store.get_many([old["id"], kept["id"], live["id"]])) == sorted(
        [kept["id"], live["id"]]
    )
    events = store.audit_events(old["id"])
    assert [(e["actor"], e["action"]) for e in events] == [("stm_expiry", "prune")]
    assert store.restore(old["id"])["content"] == old["content"]


def test_second_run_writes_nothing(store_uri: str, settings: Settings) -> None:
    store = MemoryStore.open(store_uri, settings=settings.replace(ltm_quota=1))
    ltm = add(store, "long-term fact one", tier="ltm", access=2)
    add(store, "Decision: the bug was fixed and shipped", access=7)
    add(store, "We decided to refactor the failing parser", access=7, vector=ltm["vector"])
    add(store, "expired note for today", hours=40)
    first = promote_stm(store, "a", now=NOW)
    assert first.expired == 1 and first.skipped == 2
    version = store.engine.memories.version
    again = promote_stm(store, "a", now=NOW)
    assert (again.promoted, again.expired, again.skipped_concurrent_edit) == (0, 0, 0)
    assert store.engine.memories.version == version


class PromotingStore(ShardedEngine):
    """Another writer promotes ``rows`` by hand after the pass read them, before its commit."""

    rows: Sequence[str] = ()

    def cas_write(self, changes: Any, **kw: Any) -> Any:
        for rid in self.rows:
            self.update(rid, expected_version=self.get(rid, track_access=False)["version"], tier="ltm")
        self.rows = ()
        return super().cas_write(changes, **kw)


def test_row_promoted_meanwhile_counts_as_skipped(store_uri: str, settings: Settings) -> None:
    store = MemoryStore(PromotingStore.open(store_uri, settings=settings))
    row = add(store, "We decided to keep the monorepo", access=5)
    store.engine.rows = (row["id"],)
    report = promote_stm(store, "a", now=NOW)
    assert (report.promoted, report.skipped, report.skipped_concurrent_edit) == (0, 1, 0)
    assert store.get(row["id"], track_access=False)["tier"] == "ltm"


stm_rows = st.lists(
    st.tuples(st.integers(0, 8), st.floats(0.1, 60), st.booleans(), st.sampled_from(["We decided", "note", "bug"])),
    min_size=1,
    max_size=6,
)


@hsettings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=stm_rows, quota=st.integers(0, 3))
def test_property_second_pass_changes_nothing(settings: Settings, rows: list[Any], quota: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(tmp, settings=settings.replace(ltm_quota=quota))
        for i, (access, hours, pinned, cue) in enumerate(rows):
            add(store, f"{cue} item {i} of batch {i * 13}", access=access, hours=hours, pinned=pinned)
        promote_stm(store, "a", now=NOW)
        snapshot = {r["id"]: r for r in store.list_memories("a")}
        version = store.engine.memories.version
        again = promote_stm(store, "a", now=NOW)
        assert (again.promoted, again.expired, again.skipped_concurrent_edit) == (0, 0, 0)
        assert store.engine.memories.version == version
        assert {r["id"]: r for r in store.list_memories("a")} == snapshot
