"""Rung 1: the code location loads, with every asset, check, job, schedule and sensor under its name."""

from __future__ import annotations

from pathlib import Path

import yaml
from dagster import AssetCheckKey, AssetKey, DefaultScheduleStatus, DefaultSensorStatus, StaticPartitionsDefinition

from assets.definitions import defs
from assets.partitions import shard_keys
from engram_pipeline.pass_names import PASS_NAMES
from engram_pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PER_AGENT = [
    "neighbour_graph",
    "stm_promotion",
    "importance_decay",
    "confidence_decay",
    "contradictions",
    "corpus_merge_plan",
    "corpus_merge_apply",
    "episode_clusters",
    "beliefs",
    "procedures",
    "schemas",
    "archival",
    "memory_health",
]
PER_SHARD = [
    "shards/stm_promotion",
    "shards/importance_decay",
    "shards/confidence_decay",
    "shards/contradictions",
    "shards/consolidation",
    "shards/memory_health",
    "shards/pipeline",
]
SHARD_JOBS = [
    "stm_promotion_shard_job",
    "decay_shard_job",
    "consolidation_shard_job",
    "health_shard_job",
    "full_pipeline_shard_job",
]
JOBS = [
    *SHARD_JOBS,
    "stm_promotion_job",
    "decay_job",
    "consolidation_job",
    "corpus_merge_plan_job",
    "corpus_merge_apply_job",
    "health_job",
    "maintenance_job",
    "full_pipeline_job",
]


def test_every_asset_is_defined_and_partitioned_by_agent_or_shard() -> None:
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {*PER_AGENT, *PER_SHARD, "store_maintenance"}
    for name in PER_AGENT:
        partitions = graph.get(AssetKey(name)).partitions_def
        assert partitions is not None and partitions.name == "agents", name
    for name in PER_SHARD:  # a static partition per shard of the store (ENGRAM_SHARDS)
        partitions = graph.get(AssetKey.from_user_string(name)).partitions_def
        assert isinstance(partitions, StaticPartitionsDefinition), name
        assert partitions.get_partition_keys() == shard_keys(Settings.from_env().shards), name
    assert graph.get(AssetKey("store_maintenance")).partitions_def is None


def test_shard_jobs_run_the_shard_assets_in_lineage_order() -> None:
    graph = defs.resolve_asset_graph()

    def parents(name: str) -> set[str]:
        return {k.to_user_string() for k in graph.get(AssetKey(["shards", name])).parent_keys}

    assert parents("importance_decay") == {"shards/stm_promotion"}
    assert parents("consolidation") == {"shards/confidence_decay", "shards/contradictions"}
    assert "shards/consolidation" in parents("memory_health")
    for name in SHARD_JOBS:
        job = defs.resolve_job_def(name)
        assert job.partitions_def is not None and job.partitions_def.get_partition_keys() == shard_keys(
            Settings.from_env().shards
        ), name


def test_lineage_is_the_pipeline() -> None:
    graph = defs.resolve_asset_graph()

    def parents(name: str) -> set[str]:
        return {k.to_user_string() for k in graph.get(AssetKey(name)).parent_keys}

    for consumer in ("contradictions", "corpus_merge_plan", "confidence_decay", "episode_clusters"):
        assert "neighbour_graph" in parents(consumer)
    assert "episode_clusters" in parents("beliefs") and "episode_clusters" in parents("procedures")
    assert "beliefs" in parents("schemas")
    assert "confidence_decay" in parents("archival")
    assert "corpus_merge_plan" in parents("corpus_merge_apply")
    assert "importance_decay" in parents("neighbour_graph")  # the graph is built over what decay left
    assert {"archival", "corpus_merge_plan", "importance_decay"} <= parents("memory_health")


def test_jobs_resolve() -> None:
    for name in JOBS:
        assert defs.resolve_job_def(name).name == name


def test_apply_job_config_names_the_plan() -> None:
    job = defs.resolve_job_def("corpus_merge_apply_job")
    fields = job.run_config_schema.config_type.fields["ops"].config_type.fields
    config = fields["corpus_merge_apply"].config_type.fields["config"].config_type
    assert "plan_id" in config.fields and not config.fields["plan_id"].is_required


def test_schedules_and_their_default_statuses() -> None:
    expected = {
        "stm_promotion_schedule": ("*/5 * * * *", DefaultScheduleStatus.RUNNING, "stm_promotion_shard_job"),
        "decay_schedule": ("0 0 * * *", DefaultScheduleStatus.RUNNING, "decay_shard_job"),
        "consolidation_schedule": ("0 */6 * * *", DefaultScheduleStatus.RUNNING, "consolidation_shard_job"),
        "health_schedule": ("0 * * * *", DefaultScheduleStatus.RUNNING, "health_shard_job"),
        "maintenance_schedule": ("0 0 * * *", DefaultScheduleStatus.RUNNING, "maintenance_job"),
        "corpus_merge_plan_schedule": ("0 0 * * *", DefaultScheduleStatus.STOPPED, "corpus_merge_plan_job"),
    }
    for name, (cron, status, job) in expected.items():
        schedule = defs.resolve_schedule_def(name)
        assert (schedule.cron_schedule, schedule.default_status, schedule.job_name) == (cron, status, job), name


def test_sensor_runs_by_default() -> None:
    sensor = defs.resolve_sensor_def("agent_partitions_sensor")
    assert sensor.default_status == DefaultSensorStatus.RUNNING


def test_invariant_checks_guard_the_passes() -> None:
    checks = {(k.asset_key.to_user_string(), k.name) for k in defs.resolve_asset_graph().asset_check_keys}
    assert ("corpus_merge_apply", "superseded_rows_have_canonical") in checks
    assert ("contradictions", "contradicted_rows_have_partner") in checks
    assert ("importance_decay", "hidden_rows_have_audit_pre_image") in checks
    assert ("archival", "hidden_rows_have_audit_pre_image") in checks
    assert ("importance_decay", "versions_never_go_backwards") in checks
    job = defs.resolve_job_def("corpus_merge_apply_job")
    key = AssetCheckKey(AssetKey("corpus_merge_apply"), "superseded_rows_have_canonical")
    assert key in job.asset_layer.asset_graph.asset_check_keys


def test_instance_and_workspace_files() -> None:
    instance = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    assert instance["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert instance["run_retries"] == {"enabled": True, "max_retries": 2}
    assert instance["telemetry"] == {"enabled": False}
    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())
    assert workspace["load_from"][0]["python_module"]["module_name"] == "assets.definitions"


def test_every_pass_retries() -> None:
    shard_nodes = {key.replace("/", "__") for key in PER_SHARD}  # a prefixed key's op name
    for job_name in ("full_pipeline_job", "corpus_merge_apply_job", "maintenance_job", *SHARD_JOBS):
        nodes = defs.resolve_job_def(job_name).graph.node_dict.items()
        assert nodes, job_name
        for name, node in nodes:
            if name in PER_AGENT or name in shard_nodes or name == "store_maintenance":
                policy = node.definition.retry_policy
                assert policy is not None and policy.max_retries >= 2, name


def test_each_pass_has_the_asset_its_public_names_say() -> None:
    """``pass_names`` names each pass's asset: the per-agent asset, the shard sweep (``shards/<asset>``), or both."""
    keys = set(defs.resolve_asset_graph().get_all_asset_keys())
    for name, names in PASS_NAMES.items():
        assert names.asset is not None, name
        assert {AssetKey([names.asset]), AssetKey(["shards", names.asset])} & keys, name
