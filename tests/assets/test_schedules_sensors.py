"""Rung 4: the sensor and the schedules evaluated against an ephemeral instance."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from dagster import (
    DagsterInstance,
    DefaultScheduleStatus,
    Definitions,
    RepositoryDefinition,
    ScheduleDefinition,
    SensorResult,
    SkipReason,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
)
from dagster._core.definitions.schedule_definition import ScheduleExecutionData

from assets.definitions import defs
from assets.partitions import AGENTS, shard_keys, shard_partitions
from assets.resources import EngramStore
from assets.schedules import build_schedules, interval_cron
from assets.sensors import agent_partitions_sensor
from assets.shard_assets import shard_sweeps
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

TICK = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REPO = defs.get_repository_def()  # to resolve the jobs and partitions that run requests name


@pytest.fixture
def temp_instance() -> Iterator[DagsterInstance]:
    """A throwaway instance on a temporary directory (a schedule context needs an instance reference, which
    ``DagsterInstance.ephemeral()`` cannot give)."""
    with instance_for_test() as instance:
        yield instance


def sensor_tick(instance: DagsterInstance, engram: EngramStore, cursor: str | None) -> SensorResult | SkipReason:
    context = build_sensor_context(instance=instance, cursor=cursor, resources={"engram": engram})
    return agent_partitions_sensor(context)


def test_sensor_registers_new_agents_and_says_why_it_skips(engram: EngramStore, seeded: MemoryStore) -> None:
    instance = DagsterInstance.ephemeral()
    first = sensor_tick(instance, engram, None)
    assert isinstance(first, SensorResult)
    (request,) = first.dynamic_partitions_requests
    assert request.partitions_def_name == AGENTS and sorted(request.partition_keys) == seeded.agents()
    instance.add_dynamic_partitions(AGENTS, list(request.partition_keys))  # what the daemon does with it

    unchanged = sensor_tick(instance, engram, first.cursor)
    assert isinstance(unchanged, SkipReason) and "unchanged" in (unchanged.skip_message or "")

    seeded.remember("new-agent", "User prefers tea")
    seeded.remember("coding-assistant", "User prefers tabs")  # an agent already registered
    second = sensor_tick(instance, engram, first.cursor)
    assert isinstance(second, SensorResult) and second.cursor != first.cursor
    assert [list(r.partition_keys) for r in second.dynamic_partitions_requests] == [["new-agent"]]
    instance.add_dynamic_partitions(AGENTS, ["new-agent"])

    seeded.remember("coding-assistant", "User prefers spaces in YAML")
    nothing_new = sensor_tick(instance, engram, second.cursor)
    assert isinstance(nothing_new, SensorResult) and not nothing_new.dynamic_partitions_requests
    assert "no new agents" in (nothing_new.skip_reason.skip_message or "")  # type: ignore[union-attr]


def schedule_named(settings: Settings, name: str):  # type: ignore[no-untyped-def]
    return next(s for s in build_schedules(settings) if s.name == name)


def evaluate(
    instance: DagsterInstance, schedule: ScheduleDefinition, repository: RepositoryDefinition = REPO
) -> ScheduleExecutionData:
    """One tick of ``schedule`` at TICK, resolving the jobs and partitions its requests name in ``repository``."""
    with build_schedule_context(instance=instance, scheduled_execution_time=TICK, repository_def=repository) as context:
        return schedule.evaluate_tick(context)


@pytest.mark.parametrize(
    "name", ["stm_promotion_schedule", "decay_schedule", "consolidation_schedule", "health_schedule"]
)
def test_maintenance_schedules_request_one_run_per_shard_with_deterministic_run_keys(
    temp_instance: DagsterInstance, name: str
) -> None:
    settings = Settings.from_env()  # the shard count the code location loaded with
    schedule = schedule_named(settings, name)
    requests = list(evaluate(temp_instance, schedule).run_requests or [])
    assert [r.partition_key for r in requests] == shard_keys(settings.shards)
    assert [r.run_key for r in requests] == [f"{name}:{k}:{TICK.isoformat()}" for k in shard_keys(settings.shards)]
    assert [r.run_key for r in evaluate(temp_instance, schedule).run_requests or []] == [r.run_key for r in requests]
    assert all(not r.run_config for r in requests)  # a sweep takes no per-run knobs (consolidation: scope recent)


def test_a_tick_costs_a_run_per_shard_however_many_agents(temp_instance: DagsterInstance, tmp_path: Path) -> None:
    temp_instance.add_dynamic_partitions(AGENTS, [f"agent-{n}" for n in range(50)])  # agents do not matter
    schedule = schedule_named(Settings.from_env({"ENGRAM_SHARDS": "8"}), "stm_promotion_schedule")
    # A code location loaded with ENGRAM_SHARDS=8: the shard assets over 8 partitions, and this schedule.
    location = Definitions(
        assets=shard_sweeps(shard_partitions(8)),
        schedules=[schedule],
        resources={"engram": EngramStore(uri=str(tmp_path / "store"), embedder="hashing")},
    )
    requests = list(evaluate(temp_instance, schedule, location.get_repository_def()).run_requests or [])
    assert [r.partition_key for r in requests] == [str(k) for k in range(8)]
    assert len({r.run_key for r in requests}) == 8


def test_merge_plan_schedule_requests_one_run_per_agent_with_deterministic_run_keys(
    temp_instance: DagsterInstance, seeded: MemoryStore
) -> None:
    instance = temp_instance
    instance.add_dynamic_partitions(AGENTS, seeded.agents())
    schedule = schedule_named(
        Settings.from_env({"ENGRAM_CORPUS_MERGE_INTERVAL_MS": "86400000"}), "corpus_merge_plan_schedule"
    )
    agents = instance.get_dynamic_partitions(AGENTS)

    requests = list(evaluate(instance, schedule).run_requests or [])
    assert sorted(r.partition_key for r in requests) == sorted(agents)
    assert {r.run_key for r in requests} == {f"corpus_merge_plan_schedule:{a}:{TICK.isoformat()}" for a in agents}
    assert [r.run_key for r in evaluate(instance, schedule).run_requests or []] == [r.run_key for r in requests]


def test_merge_plan_schedule_without_agents_skips_and_says_why(temp_instance: DagsterInstance) -> None:
    data = evaluate(temp_instance, schedule_named(Settings.from_env({}), "corpus_merge_plan_schedule"))
    assert not data.run_requests and "agent_partitions_sensor" in (data.skip_message or "")


def test_maintenance_schedule_requests_one_run(temp_instance: DagsterInstance) -> None:
    schedule = schedule_named(Settings.from_env({}), "maintenance_schedule")
    with build_schedule_context(instance=temp_instance, scheduled_execution_time=TICK, repository_def=REPO) as context:
        (request,) = schedule.evaluate_tick(context).run_requests or []
    assert request.partition_key is None and request.run_key == f"maintenance_schedule:{TICK.isoformat()}"


def test_interval_zero_leaves_the_schedule_stopped() -> None:
    env = {"STM_CONSOLIDATION_INTERVAL_MS": "0", "MEMORY_CONSOLIDATION_INTERVAL_MS": "7200000"}
    schedules = {s.name: s for s in build_schedules(Settings.from_env(env))}
    assert schedules["stm_promotion_schedule"].default_status == DefaultScheduleStatus.STOPPED
    assert schedules["stm_promotion_schedule"].cron_schedule == "*/5 * * * *"  # the default, if started by hand
    assert schedules["corpus_merge_plan_schedule"].default_status == DefaultScheduleStatus.RUNNING
    assert schedules["corpus_merge_plan_schedule"].cron_schedule == "0 */2 * * *"


@pytest.mark.parametrize(
    ("ms", "cron"),
    [
        (60_000, "* * * * *"),
        (300_000, "*/5 * * * *"),
        (3_600_000, "0 * * * *"),
        (5_400_000, "0 */2 * * *"),
        (21_600_000, "0 */6 * * *"),
        (86_400_000, "0 0 * * *"),
        (172_800_000, "0 0 */2 * *"),
        (1, "* * * * *"),
    ],
)
def test_interval_cron(ms: int, cron: str) -> None:
    assert interval_cron(ms) == cron
