"""Review-gated corpus merge: plan (dry run), apply exactly the plan, vetoes, no chains, restore.

Rows are inserted as an import would (no write-time checks) with hand-made vectors of exact cosines.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus
from engram_pipeline.lifecycle.graph import agent_graph
from engram_pipeline.model import loads_metadata, rows_to_table
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore, PlanClosed

THRESHOLDS = dict(
    duplicate_threshold=0.97, merge_threshold=0.85, contradiction_threshold=0.8, contradiction_threshold_max=0.97
)
VOLATILE = ("version", "updated_at", "write_token")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def topic(seed: int) -> np.ndarray:
    return unit(np.random.default_rng(seed).normal(size=384))


def at_cosine(base: np.ndarray, cosine: float, seed: int) -> np.ndarray:
    w = np.random.default_rng(seed).normal(size=base.shape)
    w = unit(w - (w @ base) * base)
    return unit(cosine * base + np.sqrt(1 - cosine**2) * w)


def put(store: MemoryStore, content: str, vector: np.ndarray | None, *, age_days: float = 0, **fields: Any) -> str:
    row = store.engine.new_row("a", content, created_at=T0 - timedelta(days=age_days))
    row.update(fields, vector=None if vector is None else [float(x) for x in vector])
    if vector is None:
        store.engine.memories.add(rows_to_table([row], store.engine.memory_schema))
    else:
        store.engine.insert_rows([row])
    return str(row["id"])


def strip(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in VOLATILE}


def rows(store: MemoryStore) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in store.list_memories("a")}


def versions(store: MemoryStore) -> dict[str, int]:
    return {i: r["version"] for i, r in rows(store).items()}


@pytest.fixture
def store(tmp_path: Path, settings: Settings) -> MemoryStore:
    return MemoryStore.open(str(tmp_path / "store"), settings=settings.replace(**THRESHOLDS))


def deploy_cluster(store: MemoryStore) -> tuple[str, str, str]:
    """A canonical (highest importance) and two rephrasings in the band."""
    b = topic(0)
    c = put(store, "The deploy runs every night at two", b, importance=0.8, tags=["ops"])
    m1 = put(store, "Deploy runs every night at two", at_cosine(b, 0.92, 1), importance=0.5, tags=["ci"])
    m2 = put(store, "Every night at two the deploy runs", at_cosine(b, 0.9, 2), importance=0.4)
    return c, m1, m2


def test_dry_run_plans_and_writes_nothing_to_memories(store: MemoryStore) -> None:
    c, m1, m2 = deploy_cluster(store)
    put(store, "Unrelated fact about lunch", topic(9))
    before = versions(store)
    report = consolidate_corpus(store, "a")
    assert report.dry_run and report.plan_id
    assert (report.scanned, report.clusters, report.merged, report.skipped_concurrent_edit) == (4, 1, 2, 0)
    assert versions(store) == before and store.engine.links_for_agent("a").num_rows == 0
    (cluster,) = report.per_cluster
    assert cluster["canonical_id"] == c and cluster["canonical"] == "The deploy runs every night at two"
    assert [(m["id"], m["content"]) for m in cluster["members"]] == [
        (m1, "Deploy runs every night at two"),
        (m2, "Every night at two the deploy runs"),
    ]
    assert [m["similarity"] for m in cluster["members"]] == pytest.approx([0.92, 0.9], abs=1e-4)
    plan = store.engine.get_plan(report.plan_id)
    assert plan is not None and plan["status"] == "pending"
    (body,) = plan["body"]["clusters"]
    assert body["canonical"] == {"id": c, "content": "The deploy runs every night at two", "version": 1}
    assert [(m["id"], m["version"]) for m in body["members"]] == [(m1, 1), (m2, 1)]
    # planning again on unchanged data stores no second plan
    assert consolidate_corpus(store, "a").plan_id == report.plan_id


def test_apply_supersedes_members_links_audits_and_unions_tags(store: MemoryStore) -> None:
    c, m1, m2 = deploy_cluster(store)
    plan = consolidate_corpus(store, "a")
    report = apply_corpus_merge(store, "a")
    assert report.plan_id == plan.plan_id and not report.dry_run
    assert (report.clusters, report.merged, report.skipped_concurrent_edit) == (1, 2, 0)
    now = rows(store)
    assert now[c]["status"] == "active" and now[c]["tags"] == ["ci", "ops"]
    assert [e["id"] for e in loads_metadata(now[c])["merged_from"]] == [m1, m2]
    for m in (m1, m2):
        assert now[m]["status"] == "superseded" and now[m]["superseded_by"] == c
        merged = loads_metadata(now[m])["merged"]
        assert merged["into"] == c and merged["reason"] and merged["at"] and merged["plan_id"] == plan.plan_id
        (event,) = [e for e in store.audit_events(m) if e["action"] == "merge"]
        assert event["actor"] == "corpus_consolidation" and event["before"]
    links = {(r["src_id"], r["dst_id"], r["rel"]) for r in store.engine.links_for_agent("a").to_pylist()}
    assert links == {(m1, c, "duplicate-of"), (m2, c, "duplicate-of")}
    assert store.engine.get_plan(plan.plan_id)["status"] == "applied"  # type: ignore[index]
    assert [h.memory["id"] for h in store.recall("a", vector=topic(0).tolist(), k=5, track_access=False)] == [c]


def test_apply_twice_changes_nothing(store: MemoryStore) -> None:
    deploy_cluster(store)
    plan = consolidate_corpus(store, "a")
    apply_corpus_merge(store, "a", plan.plan_id)
    before, links = versions(store), store.engine.links_for_agent("a").num_rows
    again = apply_corpus_merge(store, "a", plan.plan_id)
    assert (again.merged, again.skipped_concurrent_edit) == (0, 0)
    assert apply_corpus_merge(store, "a").plan_id is None  # nothing pending
    assert versions(store) == before and store.engine.links_for_agent("a").num_rows == links
    # and a new plan over the merged corpus is empty
    assert consolidate_corpus(store, "a", dry_run=False).merged == 0
    assert versions(store) == before


def test_apply_applies_exactly_the_plan(store: MemoryStore) -> None:
    c, m1, m2 = deploy_cluster(store)
    plan = consolidate_corpus(store, "a")
    late = put(store, "The deploy runs each night at two", at_cosine(topic(0), 0.93, 5))
    report = apply_corpus_merge(store, "a", plan.plan_id)
    assert report.merged == 2
    assert rows(store)[late]["status"] == "active" and rows(store)[late]["version"] == 1


def test_member_edited_after_the_plan_is_skipped_and_counted(store: MemoryStore) -> None:
    c, m1, m2 = deploy_cluster(store)
    plan = consolidate_corpus(store, "a")
    store.update(m1, expected_version=1, content="Deploy runs every night at three")
    report = apply_corpus_merge(store, "a", plan.plan_id)
    assert (report.merged, report.skipped_concurrent_edit) == (1, 1)
    now = rows(store)
    assert now[m1]["status"] == "active" and now[m1]["content"] == "Deploy runs every night at three"
    assert now[m1]["version"] == 2 and now[m2]["superseded_by"] == c
    assert now[c]["tags"] == ["ops"]  # the skipped member's tags are not taken
    outcomes = {m["id"]: m["outcome"] for m in report.per_cluster[0]["members"]}
    assert outcomes == {m1: "skipped_concurrent_edit", m2: "merged"}


def test_canonical_edited_after_the_plan_skips_its_cluster(store: MemoryStore) -> None:
    c, m1, m2 = deploy_cluster(store)
    plan = consolidate_corpus(store, "a")
    store.update(c, expected_version=1, pinned=True)
    before = versions(store)
    report = apply_corpus_merge(store, "a", plan.plan_id)
    assert (report.merged, report.skipped_concurrent_edit) == (0, 3)
    assert versions(store) == before


def test_restore_of_a_merged_member_gives_back_its_pre_image(store: MemoryStore) -> None:
    c, m1, m2 = deploy_cluster(store)
    original = store.get(m1, track_access=False)
    consolidate_corpus(store, "a", dry_run=False)
    restored = store.restore(m1)
    assert strip(restored) == strip(original)
    assert restored["status"] == "active" and restored["superseded_by"] is None


def test_canonical_is_highest_importance_then_newest_then_lowest_id(store: MemoryStore) -> None:
    b = topic(0)
    older = put(store, "The cache is warmed at boot", b, importance=0.5, age_days=5)
    newer = put(store, "Cache is warmed at boot", at_cosine(b, 0.9, 1), importance=0.5, age_days=1)
    (cluster,) = consolidate_corpus(store, "a").per_cluster
    assert cluster["canonical_id"] == newer and [m["id"] for m in cluster["members"]] == [older]
    b2 = topic(1)
    x = put(store, "Logs rotate weekly on the server", b2, importance=0.5, id="id-b", age_days=2)
    y = put(store, "Logs rotate weekly on the servers", at_cosine(b2, 0.9, 2), importance=0.5, id="id-a",
            age_days=2)  # fmt: skip
    clusters = {c["canonical_id"]: c for c in consolidate_corpus(store, "a").per_cluster}
    assert y in clusters and x not in clusters


def test_no_chains_every_member_is_in_the_band_of_its_canonical(store: MemoryStore) -> None:
    # a ~ b and b ~ c at 0.9, but a . c = cos(2 * acos(0.9)) = 0.62: c must not ride along with a. The
    # band rule decides here: the calibrated judge would rightly call a and c (a rewording) duplicates.
    store.engine.settings = store.settings.replace(judge="rules")
    e1, e2 = np.eye(384)[0], np.eye(384)[1]
    theta = np.arccos(0.9)
    a = put(store, "The build uses cached wheels", e1, importance=0.9)
    b = put(store, "The build uses cached wheels now", np.cos(theta) * e1 + np.sin(theta) * e2, importance=0.5)
    c = put(store, "Build uses the cached wheels", np.cos(2 * theta) * e1 + np.sin(2 * theta) * e2, importance=0.1)
    (cluster,) = consolidate_corpus(store, "a").per_cluster
    assert cluster["canonical_id"] == a and [m["id"] for m in cluster["members"]] == [b]
    assert c not in {m["id"] for m in cluster["members"]}


def test_contradiction_in_the_band_is_never_merged(store: MemoryStore) -> None:
    b = topic(0)
    put(store, "User lives in Berlin", b)
    put(store, "User lives in Munich", at_cosine(b, 0.9, 1))
    b2 = topic(1)
    put(store, "A man is playing a guitar", b2)
    put(store, "A man is not playing a guitar", at_cosine(b2, 0.93, 2))
    graph = agent_graph(store, "a")
    assert sum(0.85 <= s < 0.97 for s in graph["score"].to_pylist()) == 2  # plain cosine would merge both
    report = consolidate_corpus(store, "a", graph=graph)
    assert (report.clusters, report.merged) == (0, 0)


def test_hidden_contradicted_pinned_vectorless_and_other_kind_rows_are_never_merged(store: MemoryStore) -> None:
    b = topic(0)
    put(store, "The deploy runs every night at two", b, importance=0.9)
    put(store, "Deploy runs every night at two", at_cosine(b, 0.9, 1), status="superseded", superseded_by="x")
    put(store, "Deploy runs each night at two", at_cosine(b, 0.9, 2), status="archived")
    put(store, "Deploys run every night at two", at_cosine(b, 0.9, 3), status="contradicted")
    put(store, "The deploys run every night at two", at_cosine(b, 0.9, 4), status="stale", contradiction_with=["y"])
    put(store, "Deploy ran every night at two", at_cosine(b, 0.9, 6), kind="episodic")
    put(store, "Deploy runs every single night at two", None)
    assert consolidate_corpus(store, "a").merged == 0


def test_a_pinned_row_is_never_merged_away(store: MemoryStore) -> None:
    b = topic(0)
    put(store, "The deploy runs every night at two", b, importance=0.9)
    pinned = put(store, "Deploy runs nightly at two", at_cosine(b, 0.9, 5), pinned=True, importance=0.5)
    consolidate_corpus(store, "a", dry_run=False)
    row = store.get(pinned, track_access=False)
    assert row["status"] == "active" and row["superseded_by"] is None


def test_plan_errors_and_nothing_pending(store: MemoryStore) -> None:
    deploy_cluster(store)
    assert apply_corpus_merge(store, "a").plan_id is None
    with pytest.raises(LookupError):
        apply_corpus_merge(store, "a", "plan-missing")
    plan = consolidate_corpus(store, "a")
    with pytest.raises(ValueError):
        apply_corpus_merge(store, "b", plan.plan_id)


def test_episodes_are_never_merged(store: MemoryStore) -> None:
    """Two similar episodes are two occurrences (consolidation's evidence), not one fact said twice."""
    base = topic(21)
    put(store, "Deploy failed on the lockfile; npm ci fixed it", base, kind="episodic", outcome="success")
    put(store, "The deploy failed on a lockfile and npm ci fixed it", at_cosine(base, 0.92, 22), kind="episodic")
    report = consolidate_corpus(store, "a")
    assert (report.clusters, report.merged) == (0, 0)


def test_apply_without_a_plan_id_never_picks_a_plan_made_after_the_review(store: MemoryStore) -> None:
    """A near-duplicate imported after the review makes a second plan, which expires the reviewed one: applying
    without an id refuses (which plan was reviewed is the caller's to say), the expired one cannot be applied,
    and the newer one applies by its id."""
    b = topic(0)
    c = put(store, "The deploy runs every night at two", b, importance=0.8)
    m1 = put(store, "Deploy runs every night at two", at_cosine(b, 0.92, 1), importance=0.5)
    reviewed = consolidate_corpus(store, "a").plan_id
    late = put(store, "Every night at two the deploy runs", at_cosine(b, 0.9, 2), importance=0.4)
    newer = consolidate_corpus(store, "a")
    assert newer.plan_id != reviewed and newer.expired == (reviewed,)
    before = versions(store)
    with pytest.raises(ValueError, match=f"one pending corpus-merge plan, {newer.plan_id}, made after {reviewed}"):
        apply_corpus_merge(store, "a")
    with pytest.raises(PlanClosed, match=f"plan {reviewed} expired: plan {newer.plan_id} was made after it"):
        apply_corpus_merge(store, "a", reviewed)
    assert versions(store) == before
    assert apply_corpus_merge(store, "a", newer.plan_id).merged == 2
    now = rows(store)
    assert now[m1]["superseded_by"] == c and now[late]["superseded_by"] == c


def test_apply_without_a_plan_id_never_picks_among_several_pending_plans(store: MemoryStore) -> None:
    """Two plans stored at once (two planners racing) both stay pending: applying without an id names them."""
    deploy_cluster(store)
    first = consolidate_corpus(store, "a").plan_id
    second = store.engine.save_plan("a", store.engine.get_plan(first)["body"])  # type: ignore[index]
    before = versions(store)
    with pytest.raises(ValueError, match=f"2 pending corpus-merge plans: {first} .*, {second} "):
        apply_corpus_merge(store, "a")
    assert versions(store) == before
    assert apply_corpus_merge(store, "a", first).merged == 2


def test_pairs_at_or_above_the_duplicate_threshold_are_merged_unless_they_contradict(store: MemoryStore) -> None:
    # An earlier write let these through (an import, or thresholds changed since): no gap above the band.
    b = topic(0)
    keep = put(store, "The deploy runs every night at two", b, importance=0.9)
    twin = put(store, "The deploy runs every night at two.", at_cosine(b, 0.99, 1))
    b2 = topic(1)
    put(store, "User lives in Berlin", b2)
    put(store, "User lives in Munich", at_cosine(b2, 0.99, 2))
    report = consolidate_corpus(store, "a")
    assert report.judge.startswith("calibrated:")
    (cluster,) = report.per_cluster
    assert cluster["canonical_id"] == keep and [m["id"] for m in cluster["members"]] == [twin]
    assert store.engine.latest_plan("a", status="pending")["body"]["judge"] == report.judge


def test_candidates_are_bounded_per_row() -> None:
    import pyarrow as pa

    from engram_pipeline.lifecycle.corpus_merge import nearest_per_row

    # a star of 10 rows around "hub" and one far pair: each row keeps its 2 nearest, so the hub keeps 2 and
    # the leaves keep their edge to the hub (their only one).
    src = ["hub"] * 10 + ["x"]
    dst = [f"l{i}" for i in range(10)] + ["y"]
    pairs = pa.table(
        {"src_id": src, "dst_id": dst, "score": pa.array([0.9 - i / 100 for i in range(10)] + [0.5], pa.float32())}
    )
    assert nearest_per_row(pairs, 2).num_rows == 11, "a pair among the nearest of either side is kept"
    chain = pa.table({"src_id": ["a", "a", "a", "b", "b", "c"], "dst_id": ["b", "c", "d", "c", "d", "d"],
                      "score": pa.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], pa.float32())})  # fmt: skip
    kept = nearest_per_row(chain, 1).to_pylist()
    assert {(r["src_id"], r["dst_id"]) for r in kept} == {("a", "b"), ("a", "c"), ("a", "d")}
