"""Retention: age and neglect lower rank and tier, they never remove a fact; only what is held elsewhere (a
merge canonical, a derived belief) leaves recall, and recall still finds it. These hold under the default
`signal` policy as under `safe`; what `signal` adds (old, never-recalled noise is archived) is in
test_forgetting_noise.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_pipeline.lifecycle.archival import archive_faded
from engram_pipeline.lifecycle.confidence import decay_confidence
from engram_pipeline.lifecycle.consolidation import consolidate
from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.lifecycle.pipeline import run_pipeline
from engram_pipeline.lifecycle.retention import holders
from engram_pipeline.settings import Settings, SettingsError
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.recall import VISIBLE_EVIDENCE

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def add(store: MemoryStore, content: str, *, days: float, **fields: Any) -> dict[str, Any]:
    """An LTM row created ``days`` before T0, never accessed (bypasses write-time checks)."""
    row = store.engine.new_row("a", content, tier="ltm", created_at=T0 - timedelta(days=days), **fields)
    row["vector"] = store.engine.embed([content])[0].tolist()
    assert store.engine.insert_rows([row]) == [row["id"]]
    return row


def hide_behind(store: MemoryStore, member: dict[str, Any], canonical: dict[str, Any]) -> None:
    """What an applied corpus merge leaves: the member superseded by the canonical, linked duplicate-of."""
    cur = store.get(member["id"], track_access=False)
    change = {"id": member["id"], "version": cur["version"], "status": "superseded", "superseded_by": canonical["id"]}
    assert store.engine.cas_write([change], actor="test", action="merge", audit=True).applied
    store.engine.add_links(
        [{"agent_id": "a", "src_id": member["id"], "dst_id": canonical["id"], "rel": "duplicate-of"}]
    )


def test_the_default_policy_is_signal_safe_and_seed_stay_selectable_and_an_unknown_one_is_refused() -> None:
    assert Settings().retention_policy == "signal"
    for name in ("safe", "seed"):
        assert Settings.from_env({"ENGRAM_RETENTION_POLICY": name}).retention_policy == name
    with pytest.raises(SettingsError, match="ENGRAM_RETENTION_POLICY"):
        Settings.from_env({"ENGRAM_RETENTION_POLICY": "forget-everything"})


def test_a_year_without_recall_keeps_every_memory_visible(store: MemoryStore) -> None:
    old = [add(store, f"the team offsite is in city number {i}", days=400 + i) for i in range(3)]
    later = T0 + timedelta(days=365)
    decay = decay_importance(store, "a", now=later)
    conf = decay_confidence(store, "a", now=later)
    arch = archive_faded(store, "a", now=later)
    assert (decay.pruned, conf.archived_count, arch.archived) == (0, 0, 0)
    rows = {r["id"]: r for r in store.list_memories("a")}
    assert set(rows) == {r["id"] for r in old}
    # neglect lowered rank and tier, not visibility: stale rows are recalled, confidence fell under the floor
    assert all(r["status"] == "stale" and r["confidence"] < store.settings.archive_confidence for r in rows.values())
    hits = store.recall("a", "team offsite city number 1", k=3, now=later, track_access=False)
    assert {h.memory["id"] for h in hits} == {r["id"] for r in old}


def test_the_seed_policy_still_prunes_by_age(seed_store: MemoryStore) -> None:
    gone = add(seed_store, "the team offsite is in Lisbon", days=400)
    assert decay_importance(seed_store, "a", now=T0).pruned == 1
    assert seed_store.get_many([gone["id"]]) == []


def test_a_faded_merged_member_is_pruned_and_restorable(store: MemoryStore) -> None:
    canonical = add(store, "User prefers dark mode in the editor", days=200)
    member = add(store, "user likes the editor in dark mode", days=200)
    loner = add(store, "the printer on floor two is broken", days=200)
    hide_behind(store, member, canonical)
    held = holders(store, "a")
    assert held.may_prune(member["id"]) and not held.may_prune(canonical["id"]) and not held.may_prune(loner["id"])
    report = decay_importance(store, "a", now=T0)
    assert report.pruned == 1
    assert {r["id"] for r in store.list_memories("a")} == {canonical["id"], loner["id"]}
    restored = store.restore(member["id"])
    assert restored["superseded_by"] == canonical["id"]


def test_consolidated_episodes_are_archived_and_recall_returns_them_as_evidence(store: MemoryStore) -> None:
    texts = ("User lives in Berlin", "The user lives in Berlin.", "User lives in Berlin now")
    episodes = [
        store.remember("a", t, kind="episodic", created_at=T0 - timedelta(days=100), confidence=0.3).memory
        for t in texts
    ]
    lonely = store.remember("a", "User once visited Oslo", kind="episodic", confidence=0.3).memory
    report = consolidate(store, "a", scope="full", now=T0)
    assert report.beliefs_created == 1 and report.archived == 3
    statuses = {r["id"]: r["status"] for r in store.list_memories("a")}
    assert [statuses[e["id"]] for e in episodes] == ["archived"] * 3
    assert statuses[lonely["id"]] != "archived"  # below the floor too, but nothing holds what it says
    hits = store.recall("a", "where does the user live", k=3, now=T0, track_access=False)
    belief = next(h for h in hits if h.memory["source"] == "derived")
    assert {e["id"] for e in belief.evidence} == {e["id"] for e in episodes}
    assert all("vector" in e for e in belief.evidence)
    served = store.recall("a", "where does the user live", k=3, now=T0, track_access=False, with_vectors=False)
    assert all("vector" not in e for h in served for e in h.evidence)
    assert all(h.evidence == () for h in store.recall("a", "Berlin", k=3, now=T0, track_access=False, evidence=0))


def _a_belief_over_visible_turns(store: MemoryStore) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Three recent turns a belief is derived from (still visible: nothing archives them yet), and small talk."""
    texts = ("Kim: I live in Berlin, near the park.", "Kim: I still live in Berlin.", "Kim: I live in Berlin now.")
    turns = [
        store.remember("a", t, kind="episodic", created_at=T0 - timedelta(days=2 + n)).memory
        for n, t in enumerate(texts)
    ]
    yesterday = T0 - timedelta(days=1)
    chat = [
        store.remember("a", f"Kim: see you at the {w} later!", kind="episodic", created_at=yesterday).memory
        for w in ("gym", "park")
    ]
    assert consolidate(store, "a", scope="full", now=T0).beliefs_created == 1
    assert all(r["status"] != "archived" for r in store.get_many([t["id"] for t in turns]))
    return turns, chat


def test_a_belief_brings_its_visible_turns_as_evidence_and_they_take_no_slot_of_their_own(
    store: MemoryStore,
) -> None:
    # issue 34: the belief that answers a question outranked the turn it came from, which fell out of the k
    turns, _ = _a_belief_over_visible_turns(store)
    hits = store.recall("a", "Kim lives in Berlin", k=2, now=T0, track_access=False)
    above = []
    for h in hits:
        if h.memory["source"] == "derived":
            break
        above.append(h.memory["id"])
    belief = next(h for h in hits if h.memory["source"] == "derived")
    carried = [e["id"] for e in belief.evidence]
    # one visible turn comes with it (where it comes from): never one ranked above it, never more than one
    assert len(carried) == VISIBLE_EVIDENCE and set(above + carried) <= {t["id"] for t in turns}
    assert not set(above) & set(carried)
    shown = [m["id"] for h in hits for m in (h.memory, *h.evidence)]
    assert len(shown) == len(set(shown)) and len(hits) == 2
    assert all(e["status"] == "active" for e in belief.evidence)


def test_a_visible_turn_returned_as_evidence_counts_as_recalled(store: MemoryStore) -> None:
    turns, chat = _a_belief_over_visible_turns(store)
    hits = store.recall("a", "Kim lives in Berlin", k=1, now=T0, evidence=0)
    assert [h.memory["source"] for h in hits] == ["derived"] and hits[0].evidence == ()
    assert [r["access_count"] for r in store.get_many([t["id"] for t in turns])] == [0, 0, 0]
    hits = store.recall("a", "Kim lives in Berlin", k=1, now=T0)
    carried = {e["id"] for e in hits[0].evidence}
    assert len(carried) == VISIBLE_EVIDENCE and carried <= {t["id"] for t in turns}
    # get overlays the reads not folded yet: the carried turn was read, the other turns and the small talk not
    seen = {t["id"]: store.get(t["id"], track_access=False)["access_count"] for t in (*turns, *chat)}
    assert seen == {**{x["id"]: 0 for x in (*turns, *chat)}, **dict.fromkeys(carried, 1)}


def test_a_schema_does_not_carry_the_visible_belief_it_summarises(store: MemoryStore) -> None:
    turn = add(store, "Kim: I live in Berlin, near the park.", days=3, kind="episodic")
    belief = add(store, "Kim lives in Berlin.", days=1, kind="semantic", source="derived")
    schema = add(store, "Profile of kim: location=Berlin", days=1, kind="schema", source="derived")
    store.engine.add_links(
        [
            {"agent_id": "a", "src_id": schema["id"], "dst_id": belief["id"], "rel": "derived-from"},
            {"agent_id": "a", "src_id": belief["id"], "dst_id": turn["id"], "rel": "derived-from"},
        ]
    )
    hits = store.recall("a", "Profile of kim: location=Berlin", k=2, now=T0, track_access=False)
    assert [h.memory["id"] for h in hits] == [schema["id"], belief["id"]]
    # the belief answers on its own, with the turn it came from
    assert [[e["id"] for e in h.evidence] for h in hits] == [[], [turn["id"]]]


def test_evidence_is_validated(store: MemoryStore) -> None:
    store.remember("a", "User lives in Berlin")
    for bad in (-1, 11, True, 1.5):
        with pytest.raises(ValueError, match="evidence"):
            store.recall("a", "Berlin", evidence=bad)


def test_episodes_with_time_words_are_long_term(store: MemoryStore) -> None:
    turn = store.remember("a", "Caroline: I went to a support group yesterday", kind="episodic").memory
    plan = store.remember("a", "I am in a meeting right now").memory
    assert (turn["tier"], turn["expires_at"]) == ("ltm", None)
    assert plan["tier"] == "stm"


def test_the_whole_pipeline_a_year_later_hides_nothing_unheld(store: MemoryStore) -> None:
    for i in range(6):
        add(store, f"fact number {i} about the quarterly roadmap", days=30 * i)
    report = run_pipeline(store, "a", now=T0 + timedelta(days=365))
    assert report.decay.pruned == 0 and report.confidence.archived_count == 0
    assert report.health.visible == 6
