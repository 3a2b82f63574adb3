"""Rung 3: ``materialize()`` runs the whole pipeline for an agent against a seeded temporary store, with an
ephemeral instance; every asset records its report, every invariant check passes, and the review flow
(plan, read the table, apply exactly that plan) works through the jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, Definitions, materialize

from assets.definitions import defs
from assets.hygiene_assets import corpus_merge_apply
from engram_pipeline.invariants import check_all
from engram_pipeline.pass_metrics import PASS_KEYS
from engram_pipeline.store import MemoryStore
from tests.assets.test_pass_metrics import read_textfiles

MERGE_AGENT = "support-bot"
PIPELINE = [
    a for a in defs.assets or [] if getattr(a, "key", None) is None or a.key.to_user_string() != "corpus_merge_apply"
]


def pipeline_defs(resources: dict[str, Any]) -> Definitions:
    """The code location with its resources bound to the test's store."""
    return Definitions(assets=defs.assets, asset_checks=defs.asset_checks, jobs=defs.jobs, resources=resources)


@pytest.mark.slow
def test_whole_pipeline_materializes_with_reports_and_passing_checks(
    resources: dict[str, Any],
    instance: DagsterInstance,
    seeded: MemoryStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGRAM_METRICS_DIR", str(tmp_path / "metrics"))
    job = pipeline_defs(resources).resolve_job_def("full_pipeline_job")
    result = job.execute_in_process(partition_key="coding-assistant", instance=instance)
    assert result.success
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {
        "stm_promotion", "importance_decay", "neighbour_graph", "confidence_decay", "contradictions",
        "corpus_merge_plan", "episode_clusters", "beliefs", "procedures", "schemas", "archival", "memory_health",
    }  # fmt: skip
    for event in result.get_asset_materialization_events():
        meta = event.materialization.metadata
        assert "duration_s" in meta, event.asset_key
        if event.asset_key.to_user_string() not in ("neighbour_graph", "episode_clusters", "memory_health"):
            assert "skipped_concurrent_edit" in meta and "summary" in meta, event.asset_key
    # Every pass (the graph is not one) reports the same five figures, and wrote them for Prometheus.
    passes = {
        e.asset_key.to_user_string(): e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() != "neighbour_graph"
    }
    assert all(set(PASS_KEYS) <= set(meta) for meta in passes.values()), passes.keys()
    scraped = read_textfiles(tmp_path / "metrics")
    assert set(scraped) == {(name, "coding-assistant") for name in passes}
    for name, meta in passes.items():
        assert scraped[name, "coding-assistant"]["engram_pass_rows_scanned"] == meta["rows_scanned"].value, name
    assert sum(meta["rows_acted_on"].value for meta in passes.values()) > 0
    health = scraped["memory_health", "coding-assistant"]  # the growth alerts' figures (docs/operate.md)
    assert health["engram_rows_visible"] == passes["memory_health"]["visible"].value > 0
    assert "engram_rows_visible" not in scraped["importance_decay", "coding-assistant"]
    plan = scraped["corpus_merge_plan", "coding-assistant"]
    assert plan["engram_merge_members_pending"] == passes["corpus_merge_plan"]["would_merge"].value
    assert plan["engram_merge_plans_pending"] == (passes["corpus_merge_plan"]["clusters"].value > 0)
    checks = result.get_asset_check_evaluations()
    assert len(checks) >= 10 and all(c.passed for c in checks), [c.asset_check_key for c in checks if not c.passed]
    # The neighbour graph was computed once and handed over inside the run.
    graph_events = [e for e in result.all_events if e.is_step_success and e.step_key == "neighbour_graph"]
    assert len(graph_events) == 1
    assert all(r.passed for r in check_all(seeded, "coding-assistant"))
    # The stages consumed the recent episodes: the next scheduled consolidation starts after this run.
    from engram_pipeline.lifecycle.episodes import last_watermark

    assert last_watermark(seeded, "coding-assistant") is not None


def test_materialize_a_pass_on_its_own(resources: dict[str, Any], instance: DagsterInstance) -> None:
    """A pass backfilled alone (no graph from its run) builds the graph itself, even when an older run left
    one behind: a graph is only used by the run that computed it."""
    earlier = pipeline_defs(resources).resolve_job_def("decay_job")
    assert earlier.execute_in_process(partition_key="travel-assistant", instance=instance).success
    contradictions = next(a for a in defs.assets or [] if getattr(a, "key", None) and a.key.path == ["contradictions"])
    graph = next(a for a in defs.assets or [] if getattr(a, "key", None) and a.key.path == ["neighbour_graph"])
    result = materialize(
        [graph, contradictions], selection=[contradictions], partition_key="travel-assistant",
        resources=resources, instance=instance,
    )  # fmt: skip
    meta = result.asset_materializations_for_node("contradictions")[0].metadata
    assert meta["candidates"].value > 0
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("neighbour_graph is from run" in m and "recomputed" in m for m in logs)


@pytest.mark.slow
def test_review_then_apply_exactly_the_reviewed_plan(
    resources: dict[str, Any], instance: DagsterInstance, seeded: MemoryStore
) -> None:
    location = pipeline_defs(resources)
    planned = location.resolve_job_def("corpus_merge_plan_job").execute_in_process(
        partition_key=MERGE_AGENT, instance=instance
    )
    meta = planned.asset_materializations_for_node("corpus_merge_plan")[0].metadata
    plan_id = meta["plan_id"].value
    review = meta["review"].value
    clusters = seeded.engine.get_plan(plan_id)["body"]["clusters"]
    assert len(clusters) == meta["clusters"].value > 0
    for cluster in clusters:  # the reviewer reads each canonical and member, with its similarity
        assert cluster["canonical"]["content"] in review
        for member in cluster["members"]:
            assert member["content"] in review and f"{member['similarity']:.3f}" in review
    rows = meta["review_table"].value.records
    assert {r.data["role"] for r in rows} == {"canonical", "member"}

    # Someone edits a member after the review: the apply skips it and reports it.
    edited = clusters[0]["members"][0]
    seeded.update(edited["id"], expected_version=edited["version"], tags=["edited-after-review"])

    applied = location.resolve_job_def("corpus_merge_apply_job").execute_in_process(
        partition_key=MERGE_AGENT,
        instance=instance,
        run_config={"ops": {"corpus_merge_apply": {"config": {"plan_id": plan_id}}}},
    )
    assert applied.success
    out = applied.asset_materializations_for_node("corpus_merge_apply")[0].metadata
    assert out["plan_id"].value == plan_id
    assert out["skipped_concurrent_edit"].value >= 1
    assert out["merged"].value == meta["would_merge"].value - out["skipped_concurrent_edit"].value
    assert seeded.get(edited["id"], track_access=False)["superseded_by"] is None
    assert all(c.passed for c in applied.get_asset_check_evaluations())
    assert seeded.engine.get_plan(plan_id)["status"] == "applied"


def test_apply_defaults_to_the_latest_pending_plan(resources: dict[str, Any], instance: DagsterInstance) -> None:
    location = pipeline_defs(resources)
    planned = location.resolve_job_def("corpus_merge_plan_job").execute_in_process(
        partition_key=MERGE_AGENT, instance=instance
    )
    plan_id = planned.asset_materializations_for_node("corpus_merge_plan")[0].metadata["plan_id"].value
    applied = materialize([corpus_merge_apply], partition_key=MERGE_AGENT, resources=resources, instance=instance)
    assert applied.asset_materializations_for_node("corpus_merge_apply")[0].metadata["plan_id"].value == plan_id


def test_apply_refuses_an_unknown_plan_without_retrying(resources: dict[str, Any], instance: DagsterInstance) -> None:
    result = materialize(
        [corpus_merge_apply],
        partition_key=MERGE_AGENT,
        resources=resources,
        instance=instance,
        run_config={"ops": {"corpus_merge_apply": {"config": {"plan_id": "plan-that-does-not-exist"}}}},
        raise_on_error=False,
    )
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert len(failures) == 1 and "plan-that-does-not-exist" in failures[0].event_specific_data.error.message
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]


def _apply(location: Definitions, instance: DagsterInstance, **config: Any) -> Any:
    return location.resolve_job_def("corpus_merge_apply_job").execute_in_process(
        partition_key=MERGE_AGENT,
        instance=instance,
        run_config={"ops": {"corpus_merge_apply": {"config": config}}},
        raise_on_error=False,
    )


def _failure(result: Any) -> str:
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    return str(failures[0].event_specific_data.error.message)


@pytest.mark.slow
def test_apply_with_a_rejected_cluster_then_discard_and_expiry(
    resources: dict[str, Any], instance: DagsterInstance, seeded: MemoryStore
) -> None:
    location = pipeline_defs(resources)
    plan_job = location.resolve_job_def("corpus_merge_plan_job")
    meta = (
        plan_job.execute_in_process(partition_key=MERGE_AGENT, instance=instance)
        .asset_materializations_for_node("corpus_merge_plan")[0]
        .metadata
    )
    plan_id = meta["plan_id"].value
    clusters = seeded.engine.get_plan(plan_id)["body"]["clusters"]
    assert len(clusters) >= 2
    table = [r.data for r in meta["review_table"].value.records]
    assert {r["plan_id"] for r in table} == {plan_id}  # the plan id is a column
    assert sorted({r["cluster"] for r in table}) == list(range(1, len(clusters) + 1))

    applied = _apply(location, instance, plan_id=plan_id, reject=[2])
    assert applied.success
    out = applied.asset_materializations_for_node("corpus_merge_apply")[0].metadata
    assert out["rejected"].value == [2]
    records = out["review_table"].value.records
    outcomes = {r.data["cluster"]: r.data["outcome"] for r in records if r.data["role"] == "canonical"}
    assert outcomes[2] == "rejected" and outcomes[1] == "canonical"
    kept = [clusters[1]["canonical"], *clusters[1]["members"]]
    assert all(seeded.get(r["id"], track_access=False)["status"] == "active" for r in kept)
    assert all(seeded.get(m["id"], track_access=False)["superseded_by"] for m in clusters[0]["members"])
    events = seeded.engine.audit_for_agent(MERGE_AGENT, actions=["reject_merge"]).to_pylist()
    assert {e["memory_id"] for e in events} == {r["id"] for r in kept}
    assert {(e["actor"], e["run_id"]) for e in events} == {("dagster", applied.run_id)}

    # the rejected cluster is not proposed again; an older pending plan expires when a newer one is stored
    older = seeded.engine.save_plan(MERGE_AGENT, {"clusters": clusters})
    again = plan_job.execute_in_process(partition_key=MERGE_AGENT, instance=instance)
    newer = again.asset_materializations_for_node("corpus_merge_plan")[0].metadata["plan_id"].value
    assert all(
        c["canonical"]["id"] != clusters[1]["canonical"]["id"]
        for c in seeded.engine.get_plan(newer)["body"]["clusters"]
    )
    assert seeded.engine.get_plan(older)["status"] == "expired"
    assert f"plan {older} expired: plan {newer} was made after it" in _failure(
        _apply(location, instance, plan_id=older)
    )

    discarded = _apply(location, instance, plan_id=newer, discard=True)
    assert discarded.success
    assert discarded.asset_materializations_for_node("corpus_merge_apply")[0].metadata["discarded"].value is True
    assert seeded.engine.get_plan(newer)["status"] == "discarded"
    assert f"plan {newer} was discarded by dagster" in _failure(_apply(location, instance, plan_id=newer))
    assert "discard names the plan" in _failure(_apply(location, instance, discard=True))
