"""Schedules: one run per shard on each tick, with a deterministic run key.

The scheduled maintenance (promotion, decay, consolidation, health) runs the shard jobs: a tick requests one
run per ``shards`` partition, each sweeping every agent of its shard, so its cost follows ``ENGRAM_SHARDS``,
not the number of agents. The corpus merge plan stays per agent: a plan is reviewed and applied in its agent's
partition (the review table is that partition's materialization), and planning faster than people review only
writes plans that expire; at scale the plans come from ``full_pipeline_shard_job`` and are reviewed agent by
agent. Store maintenance is one run for the whole store.

Intervals come from :class:`~engram_pipeline.settings.Settings` (the memory server's variables, in ms) when the
definitions load, and become cron: promotion every 5 minutes, decay daily, five-stage consolidation every
6 hours, health hourly, maintenance daily, all running; the corpus merge plan is stopped (its interval
defaults to 0). An interval set to 0 leaves its schedule defined but stopped (on the default cron, so a person
can still start it in the UI). The run key ``<schedule>:<partition>:<tick>`` (the partition a shard number or an
agent id) makes a re-evaluated tick request nothing twice.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from assets.jobs import (
    consolidation_shard_job,
    corpus_merge_plan_job,
    decay_shard_job,
    health_shard_job,
    maintenance_job,
    stm_promotion_shard_job,
)
from assets.partitions import AGENTS, shard_keys
from engram_pipeline.model import utcnow
from engram_pipeline.settings import Settings


@dataclass(frozen=True)
class Scheduled:
    name: str
    job: UnresolvedAssetJobDefinition
    interval_field: str  # the Settings field holding the interval in ms
    partitions: Literal["shards", "agents"] | None = "shards"  # a run per shard, per agent, or one run


SCHEDULED = [
    Scheduled("stm_promotion_schedule", stm_promotion_shard_job, "stm_interval_ms"),
    Scheduled("decay_schedule", decay_shard_job, "decay_interval_ms"),
    Scheduled("consolidation_schedule", consolidation_shard_job, "consolidation_interval_ms"),  # scope "recent"
    Scheduled("health_schedule", health_shard_job, "health_interval_ms"),
    Scheduled("maintenance_schedule", maintenance_job, "maintenance_interval_ms", partitions=None),
    Scheduled("corpus_merge_plan_schedule", corpus_merge_plan_job, "merge_interval_ms", partitions="agents"),
]
DAILY = "0 0 * * *"


def interval_cron(ms: int) -> str:
    """The cron closest to "every ``ms`` milliseconds" (cron steps reset each hour or day, so an interval that
    does not divide one is rounded to whole minutes, hours or days).

    >>> [interval_cron(ms) for ms in (300_000, 3_600_000, 21_600_000, 86_400_000)]
    ['*/5 * * * *', '0 * * * *', '0 */6 * * *', '0 0 * * *']
    """
    if ms <= 0:
        raise ValueError(f"no cron for an interval of {ms} ms (0 disables the schedule)")
    minutes = max(1, round(ms / 60_000))
    if minutes < 60:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    hours = max(1, round(minutes / 60))
    if hours < 24:
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    days = max(1, round(hours / 24))
    return DAILY if days == 1 else f"0 0 */{days} * *"


def interval_schedule(spec: Scheduled, interval_ms: int, fallback_ms: int, shards: int) -> ScheduleDefinition:
    """A schedule of ``spec.job`` every ``interval_ms`` (stopped when 0): on each tick a run per shard (of
    ``shards``), per agent partition, or one run, as ``spec.partitions`` says."""
    ms = interval_ms or fallback_ms
    name = spec.name

    @schedule(
        name=name,
        job=spec.job,
        cron_schedule=interval_cron(ms) if ms > 0 else DAILY,
        default_status=DefaultScheduleStatus.RUNNING if interval_ms > 0 else DefaultScheduleStatus.STOPPED,
        description=f"{spec.job.name} every {ms / 60_000:g} minutes"
        + ("" if interval_ms > 0 else " (interval 0: off)"),
    )
    def _schedule(context: ScheduleEvaluationContext) -> Sequence[RunRequest] | SkipReason:
        tick = (context.scheduled_execution_time or utcnow()).isoformat()
        if spec.partitions is None:
            return [RunRequest(run_key=f"{name}:{tick}")]
        if spec.partitions == "shards":
            keys = shard_keys(shards)
        else:
            keys = list(context.instance.get_dynamic_partitions(AGENTS))
            if not keys:
                return SkipReason("no agent partitions yet: agent_partitions_sensor registers agents as they appear")
        return [RunRequest(run_key=f"{name}:{key}:{tick}", partition_key=key) for key in keys]

    return _schedule


def build_schedules(settings: Settings) -> list[ScheduleDefinition]:
    """Every schedule, with intervals (and so default statuses) and the shard count from ``settings``."""
    defaults = Settings()
    return [
        interval_schedule(
            spec, getattr(settings, spec.interval_field), getattr(defaults, spec.interval_field), settings.shards
        )
        for spec in SCHEDULED
    ]
