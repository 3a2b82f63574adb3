"""A review that can say no: rejected clusters (recorded, not proposed again until a row's content changes),
discarded plans, and pending plans expired by a newer one; a closed plan is never applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus
from engram_pipeline.lifecycle.merge_review import REJECT_ACTION, discard_plan, rejections_of
from engram_pipeline.settings import Settings
from engram_pipeline.store import InvalidInput, MemoryStore, PlanClosed
from tests.lib.lifecycle.test_corpus_merge import THRESHOLDS, at_cosine, deploy_cluster, put, rows, topic, versions


@pytest.fixture
def store(tmp_path: Path, settings: Settings) -> MemoryStore:
    return MemoryStore.open(str(tmp_path / "store"), settings=settings.replace(**THRESHOLDS))


def two_clusters(store: MemoryStore) -> tuple[tuple[str, str, str], tuple[str, str]]:
    """The deploy cluster (canonical, two members) and a cache cluster (canonical, one member)."""
    deploy = deploy_cluster(store)
    b = topic(3)
    cache = put(store, "The cache is warmed at boot", b, importance=0.7)
    warmed = put(store, "Cache is warmed at boot", at_cosine(b, 0.91, 4), importance=0.3)
    return deploy, (cache, warmed)


def cluster_of(report: Any, canonical: str) -> int:
    (number,) = [c["cluster"] for c in report.per_cluster if c["canonical_id"] == canonical]
    return int(number)


def canonicals(report: Any) -> set[str]:
    return {c["canonical_id"] for c in report.per_cluster}


def test_a_rejected_cluster_is_recorded_kept_and_the_others_are_merged(store: MemoryStore) -> None:
    (c, m1, m2), (k, w) = two_clusters(store)
    plan = consolidate_corpus(store, "a")
    assert [c_["cluster"] for c_ in plan.per_cluster] == [1, 2]
    no = cluster_of(plan, c)
    report = apply_corpus_merge(store, "a", plan.plan_id, reject=[no], actor="api:ops")
    assert (report.clusters, report.merged, report.rejected) == (1, 1, (no,))
    now = rows(store)
    assert all(now[i]["status"] == "active" and now[i]["version"] == 1 for i in (c, m1, m2))
    assert now[w]["superseded_by"] == k
    outcome = {x["cluster"]: x["outcome"] for x in report.per_cluster}
    assert outcome == {no: "rejected", 3 - no: "canonical"}
    # one audit event per row of the rejected cluster: who, in which plan, what content they read
    for memory_id in (c, m1, m2):
        (event,) = [e for e in store.audit_events(memory_id) if e["action"] == REJECT_ACTION]
        note = json.loads(event["after"])
        assert event["actor"] == "api:ops" and event["before"] is None
        assert (note["plan_id"], note["cluster"], note["canonical_id"]) == (plan.plan_id, no, c)
        assert set(note["content_hash"]) == {c, m1, m2}
    assert rejections_of(store, "a", str(plan.plan_id)) == {no}
    applied = store.engine.get_plan(str(plan.plan_id))
    assert applied is not None and applied["status"] == "applied" and applied["result"]["rejected"] == [no]


def test_a_rejected_cluster_is_not_proposed_again_even_after_a_re_score(store: MemoryStore) -> None:
    (c, m1, m2), _ = two_clusters(store)
    plan = consolidate_corpus(store, "a")
    apply_corpus_merge(store, "a", plan.plan_id, reject=[cluster_of(plan, c)])
    again = consolidate_corpus(store, "a")
    assert again.plan_id != plan.plan_id and (again.clusters, again.merged) == (0, 0)
    # a re-score (what decay does daily) moves the version, not the content: still rejected
    store.update(m1, expected_version=1, importance=0.45)
    assert consolidate_corpus(store, "a").clusters == 0


def test_a_rejected_cluster_comes_back_when_a_member_content_changes(store: MemoryStore) -> None:
    store.engine.settings = store.settings.replace(judge="rules")  # the band decides: the edit below adds a detail
    (c, m1, m2), _ = two_clusters(store)
    plan = consolidate_corpus(store, "a")
    apply_corpus_merge(store, "a", plan.plan_id, reject=[cluster_of(plan, c)])
    vector = store.get(m1, track_access=False)["vector"]
    store.update(m1, expected_version=1, content="Deploy runs every night at two, UTC")
    # keep it in the band of its canonical: the content changed, the meaning did not (the hashing embedder
    # would place the new words elsewhere)
    store.engine.cas_write([{"id": m1, "version": 2, "vector": vector}], actor="test", action="edit")
    again = consolidate_corpus(store, "a")
    # the changed row's pairs are free again; the pair the reviewer rejected and nobody changed is not
    (cluster,) = again.per_cluster
    assert cluster["canonical_id"] == c and [m["id"] for m in cluster["members"]] == [m1]


def test_bad_cluster_numbers_are_refused_and_nothing_is_written(store: MemoryStore) -> None:
    two_clusters(store)
    plan = consolidate_corpus(store, "a")
    before, audit = versions(store), store.engine.audit_for_agent("a").num_rows
    for bad in ([3], [0], [-1], [True]):
        with pytest.raises(InvalidInput, match=r"has 2 clusters \(numbered 1 to 2\); cannot reject"):
            apply_corpus_merge(store, "a", plan.plan_id, reject=bad)
    assert versions(store) == before and store.engine.audit_for_agent("a").num_rows == audit
    assert store.engine.get_plan(str(plan.plan_id))["status"] == "pending"  # type: ignore[index]
    with pytest.raises(InvalidInput, match="no pending corpus-merge plan: nothing to reject"):
        apply_corpus_merge(store, "b", reject=[1])


def test_a_discarded_plan_is_never_applied_and_its_clusters_may_come_back(store: MemoryStore) -> None:
    two_clusters(store)
    plan = consolidate_corpus(store, "a")
    pid = str(plan.plan_id)
    before, audit = versions(store), store.engine.audit_for_agent("a").num_rows
    report = discard_plan(store, "a", pid, actor="cli")
    assert (report.status, report.discarded, report.clusters) == ("discarded", True, 2)
    again = discard_plan(store, "a", pid)  # idempotent
    assert (again.status, again.discarded) == ("discarded", False)
    for reject in ((), (1,)):
        with pytest.raises(PlanClosed, match=f"plan {pid} was discarded by cli at .*Nothing was applied"):
            apply_corpus_merge(store, "a", pid, reject=reject)
    assert apply_corpus_merge(store, "a").plan_id is None  # nothing pending
    assert versions(store) == before and store.engine.audit_for_agent("a").num_rows == audit
    # nothing is held against a discarded plan's clusters
    assert canonicals(consolidate_corpus(store, "a")) == canonicals(plan)


def test_discard_refuses_an_applied_plan_another_agents_and_an_unknown_one(store: MemoryStore) -> None:
    deploy_cluster(store)
    plan = consolidate_corpus(store, "a")
    pid = str(plan.plan_id)
    with pytest.raises(InvalidInput, match="belongs to agent 'a'"):
        discard_plan(store, "b", pid)
    with pytest.raises(LookupError):
        discard_plan(store, "a", "plan-missing")
    apply_corpus_merge(store, "a", pid)
    with pytest.raises(InvalidInput, match="was applied already: restore brings back"):
        discard_plan(store, "a", pid)
    assert store.engine.get_plan(pid)["status"] == "applied"  # type: ignore[index]


def test_a_newer_plan_expires_the_older_pending_ones_only(store: MemoryStore) -> None:
    (c, _, _), _ = two_clusters(store)
    applied = consolidate_corpus(store, "a")
    apply_corpus_merge(store, "a", applied.plan_id, reject=[cluster_of(applied, c)])
    b = topic(5)
    put(store, "Logs rotate weekly on the server", b, importance=0.6)
    put(store, "Logs rotate weekly on the servers", at_cosine(b, 0.92, 6), importance=0.2)
    old = consolidate_corpus(store, "a")
    put(store, "The build uses cached wheels", topic(7))  # any change: the next plan is stored anew
    put(store, "Build uses the cached wheels", at_cosine(topic(7), 0.92, 8), importance=0.1)
    new = consolidate_corpus(store, "a")
    assert new.expired == (old.plan_id,) and new.plan_id != old.plan_id
    statuses = {p["plan_id"]: p["status"] for p in store.engine.plans_of("a")}
    assert statuses == {applied.plan_id: "applied", old.plan_id: "expired", new.plan_id: "pending"}
    with pytest.raises(PlanClosed, match=f"expired: plan {new.plan_id} was made after it"):
        apply_corpus_merge(store, "a", old.plan_id)
    assert consolidate_corpus(store, "a").plan_id == new.plan_id  # unchanged data: the same plan, nothing expires


def test_a_plan_whose_apply_was_interrupted_neither_expires_nor_is_discarded(store: MemoryStore) -> None:
    deploy_cluster(store)
    pid = str(consolidate_corpus(store, "a").plan_id)
    store.engine.set_cursor(
        "corpus_merge_apply", "a", {"scope": {"plan_id": pid}, "done": False, "run_id": "r", "now": "x"}
    )
    with pytest.raises(InvalidInput, match="interrupted part way: apply it again to finish"):
        discard_plan(store, "a", pid)
    put(store, "Unrelated fact about lunch", topic(9))
    put(store, "Unrelated fact about lunches", at_cosine(topic(9), 0.95, 10))
    assert consolidate_corpus(store, "a").expired == ()
    assert store.engine.get_plan(pid)["status"] == "pending"  # type: ignore[index]


def test_an_interrupted_apply_resumes_only_with_the_same_rejections(store: MemoryStore) -> None:
    from engram_pipeline.lifecycle.merge_review import record_rejections

    two_clusters(store)
    pid = str(consolidate_corpus(store, "a").plan_id)
    plan = store.engine.get_plan(pid)
    assert plan is not None
    record_rejections(store, plan, (1,), actor="reviewer", run_id="r1")  # what a killed apply left
    before = versions(store)
    with pytest.raises(InvalidInput, match=r"rejected clusters \[1\]; apply it again with the same"):
        apply_corpus_merge(store, "a", pid, reject=[2])
    assert versions(store) == before
    assert apply_corpus_merge(store, "a", pid, reject=[1]).rejected == (1,)
