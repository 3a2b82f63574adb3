"""The invariant checks find each kind of violation, and hold after any sequence of store verbs."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from engram_pipeline.invariants import (
    check_all,
    contradicted_rows_have_partner,
    hidden_rows_have_audit_pre_image,
    only_held_rows_leave_recall,
    superseded_rows_have_canonical,
    versions_never_go_backwards,
)
from engram_pipeline.lifecycle.archival import archive_faded
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.marks import mark_contradicted, mark_superseded
from engram_pipeline.store.sql import eq

A = "alice"


def two(store: MemoryStore) -> tuple[str, str]:
    a = store.remember(A, "User prefers dark mode in the terminal").memory["id"]
    b = store.remember(A, "The deploy runs every Friday at noon").memory["id"]
    return a, b


def raw_update(store: MemoryStore, memory_id: str, **values: object) -> None:
    """Write around the store's verbs, as a buggy pass would."""
    store.engine.memories.update(where=eq("id", memory_id), values=values)


def test_a_clean_store_passes_everything(store: MemoryStore) -> None:
    two(store)
    results = check_all(store, A)
    assert [r.name for r in results] == [
        "superseded_rows_have_canonical",
        "contradicted_rows_have_partner",
        "hidden_rows_have_audit_pre_image",
        "only_held_rows_leave_recall",
        "versions_never_go_backwards",
    ]
    assert all(r.passed and r.violation_count == 0 for r in results)


def test_superseded_row_needs_an_existing_canonical_and_a_link(store: MemoryStore) -> None:
    a, b = two(store)
    raw_update(store, a, status="superseded", superseded_by=b)
    result = superseded_rows_have_canonical(store, A)
    assert not result.passed and "no duplicate-of/supersedes link" in result.violations[0]["problem"]
    store.engine.add_links([{"agent_id": A, "src_id": a, "dst_id": b, "rel": "duplicate-of", "score": 0.9}])
    assert superseded_rows_have_canonical(store, A).passed
    raw_update(store, a, superseded_by="ghost")
    result = superseded_rows_have_canonical(store, A)
    assert not result.passed and "does not exist" in result.violations[0]["problem"]


def test_superseding_through_the_write_path_is_audited(store: MemoryStore) -> None:
    a, b = two(store)
    assert mark_superseded(store.engine, store.get(a, track_access=False), by=b, reason="test", actor="test")
    store.engine.add_links([{"agent_id": A, "src_id": b, "dst_id": a, "rel": "supersedes", "score": 0.9}])
    assert all(r.passed for r in check_all(store, A))
    raw_update(store, b, status="archived")  # archived by hand: no pre-image
    result = hidden_rows_have_audit_pre_image(store, A)
    assert not result.passed and result.violations[0]["id"] == b


def test_contradicted_row_needs_its_partner(store: MemoryStore) -> None:
    a, b = two(store)
    mark_contradicted(store.engine, [(a, b), (b, a)], reason="test", actor="test")
    assert contradicted_rows_have_partner(store, A).passed
    raw_update(store, a, contradiction_with=["ghost"])
    result = contradicted_rows_have_partner(store, A)
    assert not result.passed and "ghost" in result.violations[0]["problem"]
    store.delete(b)  # a partner pruned or deleted with its pre-image can be restored: still traceable
    assert contradicted_rows_have_partner(store, A).violation_count == 1


def test_a_row_gone_without_a_pre_image_is_caught(store: MemoryStore) -> None:
    a, b = two(store)
    store.update(a, expected_version=1, tags=["x"])  # leaves an audit trail of the row
    store.delete(b)  # audited: fine
    assert hidden_rows_have_audit_pre_image(store, A).passed
    store.engine.memories.delete(eq("id", a))  # not audited
    result = hidden_rows_have_audit_pre_image(store, A)
    assert not result.passed and result.violations == (
        {"id": a, "problem": "gone from memories without an audited pre-image"},
    )


def test_versions_never_go_backwards_remembers_what_it_saw(store: MemoryStore) -> None:
    a, b = two(store)
    store.update(a, expected_version=1, tags=["x"])
    assert versions_never_go_backwards(store, A).passed  # records a at 2
    store.delete(a)
    store.restore(a)  # comes back at a higher version
    assert versions_never_go_backwards(store, A).passed
    raw_update(store, b, version=0)
    result = versions_never_go_backwards(store, A)
    assert not result.passed and result.violations[0]["id"] == b
    # The record keeps the highest version seen, so the regression is reported until it is repaired.
    assert not versions_never_go_backwards(store, A).passed


VERBS = st.lists(st.sampled_from(["remember", "update", "delete", "restore", "supersede", "contradict"]), max_size=8)


@hsettings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verbs=VERBS)
def test_invariants_hold_after_any_sequence_of_store_verbs(
    tmp_path: Path, settings: Settings, verbs: list[str]
) -> None:
    store = MemoryStore.open(str(tmp_path / f"h{len(list(tmp_path.iterdir()))}"), settings=settings)
    ids = list(two(store))
    gone: list[str] = []
    for n, verb in enumerate(verbs):
        live = [i for i in ids if i not in gone]
        if verb == "remember":
            ids.append(store.remember(A, f"Note number {n}: the build cache lives in /tmp/cache-{n}").memory["id"])
        elif verb == "update" and live:
            row = store.get(live[0], track_access=False)
            store.update(row["id"], expected_version=row["version"], tags=[f"t{n}"])
        elif verb == "delete" and live:
            # Deleting a canonical strands the rows hidden behind it: that is a violation the check reports
            # (see test_superseded_row_needs_an_existing_canonical_and_a_link), not a verb sequence to allow.
            canonicals = {r["superseded_by"] for r in store.list_memories(A, status="superseded")}
            victims = [i for i in live if i not in canonicals]
            if victims:
                store.delete(victims[-1])
                gone.append(victims[-1])
        elif verb == "restore" and gone:
            store.restore(gone.pop())
        elif verb == "supersede" and len(live) >= 2:
            old, new = live[0], live[1]
            if mark_superseded(store.engine, store.get(old, track_access=False), by=new, reason="t", actor="t"):
                store.engine.add_links(
                    [{"agent_id": A, "src_id": old, "dst_id": new, "rel": "duplicate-of", "score": 0.9}]
                )
        elif verb == "contradict" and len(live) >= 2:
            mark_contradicted(store.engine, [(live[0], live[-1]), (live[-1], live[0])], reason="t", actor="t")
        assert versions_never_go_backwards(store, A).passed
    failed = [r for r in check_all(store, A) if not r.passed]
    assert not failed, [(r.name, r.violations) for r in failed]


def test_only_held_rows_leave_recall_names_an_unheld_archive(store: MemoryStore, seed_store: MemoryStore) -> None:
    # Both fixtures open the same directory. A seed-policy pass archived a row nothing holds; the invariant,
    # read under the safe policy, names it.
    row = seed_store.remember(A, "User might like jazz", confidence=0.2).memory
    assert archive_faded(seed_store, A).archived == 1
    assert only_held_rows_leave_recall(seed_store, A).details == {"policy": "seed"}
    result = only_held_rows_leave_recall(store, A)
    assert not result.passed and result.violations[0]["id"] == row["id"]
