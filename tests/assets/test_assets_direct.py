"""Rung 2: each asset called directly with ``build_asset_context``, against a seeded temporary store."""

from __future__ import annotations

import re
from typing import Any

import pytest
from dagster import AssetObservation, DagsterInstance, Failure, MaterializeResult, Output, build_asset_context

from assets import hygiene_assets
from assets.consolidation_assets import EpisodeClustersConfig, archival, beliefs, episode_clusters, procedures, schemas
from assets.graph_assets import neighbour_graph
from assets.health_assets import memory_health
from assets.hygiene_assets import CorpusMergeApplyConfig, contradictions, corpus_merge_apply, corpus_merge_plan
from assets.maintenance_assets import (
    confidence_decay,
    importance_decay,
    stm_promotion,
    store_maintenance,
)
from assets.resources import EngramStore
from engram_pipeline.settings import Settings, SettingsError
from engram_pipeline.store import MemoryStore

AGENT = "coding-assistant"
MERGE_AGENT = "support-bot"  # the sample agent with the most merge clusters under the hashing embedder


def context(engram: EngramStore, instance: DagsterInstance, agent: str = AGENT) -> Any:
    return build_asset_context(partition_key=agent, resources={"engram": engram}, instance=instance)


def test_neighbour_graph_returns_the_pairs(engram: EngramStore, instance: DagsterInstance) -> None:
    out = neighbour_graph(context(engram, instance))
    assert isinstance(out, Output)
    assert out.value.column_names == ["src_id", "dst_id", "score"]
    assert out.metadata["pairs"].value == out.value.num_rows > 0


@pytest.mark.parametrize(
    "asset, inputs",
    [(stm_promotion, {}), (importance_decay, {}), (schemas, {}), (archival, {"episode_clusters": None})],
)
def test_pass_reports_counts_cursor_and_duration(
    asset: Any, inputs: dict[str, Any], engram: EngramStore, instance: DagsterInstance
) -> None:
    result = asset(context(engram, instance), **inputs)
    assert isinstance(result, MaterializeResult)
    meta = result.metadata or {}
    assert {"duration_s", "summary"} <= set(meta)
    assert "skipped_concurrent_edit" in meta and meta["skipped_concurrent_edit"].value == 0


def test_graph_consumers_accept_a_graph_or_none(engram: EngramStore, instance: DagsterInstance) -> None:
    graph = neighbour_graph(context(engram, instance)).value
    with_graph = contradictions(context(engram, instance), neighbour_graph=graph)
    assert with_graph.metadata["candidates"].value > 0
    # Run on its own (no graph from this run), the pass builds the graph itself and finds nothing new.
    again = contradictions(context(engram, instance), neighbour_graph=None)
    assert again.metadata["flagged"].value == 0
    decayed = confidence_decay(context(engram, instance), neighbour_graph=graph)
    assert decayed.metadata["processed"].value > 0


def test_consolidation_stages(engram: EngramStore, instance: DagsterInstance) -> None:
    clusters = episode_clusters(
        context(engram, instance), config=EpisodeClustersConfig(scope="full"), neighbour_graph=None
    )
    assert isinstance(clusters, Output)
    assert isinstance(beliefs(context(engram, instance), episode_clusters=clusters.value), MaterializeResult)
    assert isinstance(procedures(context(engram, instance), episode_clusters=None), MaterializeResult)


def test_merge_plan_then_apply_exactly_that_plan(
    engram: EngramStore, instance: DagsterInstance, seeded: MemoryStore
) -> None:
    plan = corpus_merge_plan(context(engram, instance, MERGE_AGENT), neighbour_graph=None)
    plan_id = plan.metadata["plan_id"].value
    assert plan.metadata["clusters"].value > 0 and plan_id.startswith("plan-")
    assert plan.metadata["status"].value == "pending"
    assert not seeded.list_memories(MERGE_AGENT, status="superseded")  # a dry run touches nothing
    applying = context(engram, instance, MERGE_AGENT)
    applied = corpus_merge_apply(applying, config=CorpusMergeApplyConfig(plan_id=plan_id))
    assert applied.metadata["plan_id"].value == plan_id
    assert applied.metadata["merged"].value == plan.metadata["would_merge"].value
    assert len(seeded.list_memories(MERGE_AGENT, status="superseded")) == plan.metadata["would_merge"].value
    assert plan_statuses(applying) == [(MERGE_AGENT, plan_id, "applied")]  # on the plan's page


def test_a_discarded_plan_says_so_on_its_page(engram: EngramStore, instance: DagsterInstance) -> None:
    plan_id = corpus_merge_plan(context(engram, instance, MERGE_AGENT), neighbour_graph=None).metadata["plan_id"].value
    discarding = context(engram, instance, MERGE_AGENT)
    corpus_merge_apply(discarding, config=CorpusMergeApplyConfig(plan_id=plan_id, discard=True))
    assert plan_statuses(discarding) == [(MERGE_AGENT, plan_id, "discarded")]
    # a launch of the closed plan is refused, and the plan's page says why there too
    refused = context(engram, instance, MERGE_AGENT)
    with pytest.raises(Failure, match="discarded"):
        corpus_merge_apply(refused, config=CorpusMergeApplyConfig(plan_id=plan_id))
    assert plan_statuses(refused) == [(MERGE_AGENT, plan_id, "discarded")]


def plan_statuses(ctx: Any) -> list[tuple[str | None, str, str]]:
    """The observations of ``corpus_merge_plan`` a run logged: (partition, plan id, status)."""
    return [
        (e.partition, e.metadata["plan_id"].value, e.metadata["status"].value)  # type: ignore[union-attr]
        for e in ctx.op_execution_context.get_events()
        if isinstance(e, AssetObservation) and e.asset_key == corpus_merge_plan.key
    ]


def test_memory_health_embeds_the_chart(engram: EngramStore, instance: DagsterInstance) -> None:
    result = memory_health(context(engram, instance), neighbour_graph=None)
    assert "data:image/png;base64," in result.metadata["chart"].value


def test_store_maintenance_is_unpartitioned(engram: EngramStore) -> None:
    result = store_maintenance(build_asset_context(resources={"engram": engram}))
    assert "versions_after" in result.metadata


@pytest.mark.parametrize("prefix", ["", "/dagster"])
def test_the_plan_page_links_follow_the_uis_path_prefix(
    prefix: str, engram: EngramStore, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The act links are absolute paths on the UI's host: under dagster-webserver's ``--path-prefix`` they
    start with it (``ENGRAM_UI_PATH_PREFIX``), at the root with ``/locations/``."""
    monkeypatch.setenv("ENGRAM_UI_PATH_PREFIX", prefix)
    monkeypatch.setattr(hygiene_assets, "location_of", lambda _: "engram")  # as in a run launched from the UI
    plan = corpus_merge_plan(context(engram, instance, MERGE_AGENT), neighbour_graph=None)
    links = re.findall(r"\]\(([^)]+)\)", plan.metadata["act"].value)
    assert len(links) == 2
    assert all(
        link.startswith(f"{prefix}/locations/__repository__@engram/jobs/corpus_merge_apply_job/") for link in links
    )


@pytest.mark.parametrize("prefix", ["dagster", "/dagster/"])
def test_a_path_prefix_the_ui_cannot_have_is_refused(prefix: str) -> None:
    with pytest.raises(SettingsError, match="ENGRAM_UI_PATH_PREFIX"):
        Settings.from_env({"ENGRAM_UI_PATH_PREFIX": prefix})
