"""Schedules: one run per agent partition on each tick, with a deterministic run key.

Intervals come from :class:`~engram_pipeline.settings.Settings` (the memory server's variables, in ms) when the
definitions load, and become cron: promotion every 5 minutes, decay daily, five-stage consolidation every
6 hours, health hourly, maintenance daily, all running; the corpus merge plan is stopped (its interval
defaults to 0). An interval set to 0 leaves its schedule defined but stopped (on the default cron, so a person
can still start it in the UI). The run key ``<schedule>:<agent>:<tick>`` makes a re-evaluated tick request
nothing twice.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from dagster import (
    DefaultScheduleStatus,
    RunConfig,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from assets.consolidation_assets import EpisodeClustersConfig
from assets.jobs import (
    consolidation_job,
    corpus_merge_plan_job,
    decay_job,
    health_job,
    maintenance_job,
    stm_promotion_job,
)
from assets.partitions import AGENTS
from engram_pipeline.model import utcnow
from engram_pipeline.settings import Settings


@dataclass(frozen=True)
class Scheduled:
    name: str
    job: UnresolvedAssetJobDefinition
    interval_field: str  # the Settings field holding the interval in ms
    run_config: RunConfig | None = None  # the per-run knobs a scheduled run uses
    per_agent: bool = True


SCHEDULED = [
    Scheduled("stm_promotion_schedule", stm_promotion_job, "stm_interval_ms"),
    Scheduled("decay_schedule", decay_job, "decay_interval_ms"),
    Scheduled(
        "consolidation_schedule",
        consolidation_job,
        "consolidation_interval_ms",
        RunConfig({"episode_clusters": EpisodeClustersConfig(scope="recent")}),
    ),
    Scheduled("health_schedule", health_job, "health_interval_ms"),
    Scheduled("maintenance_schedule", maintenance_job, "maintenance_interval_ms", per_agent=False),
    Scheduled("corpus_merge_plan_schedule", corpus_merge_plan_job, "merge_interval_ms"),
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


def per_agent_schedule(spec: Scheduled, interval_ms: int, fallback_ms: int) -> ScheduleDefinition:
    """A schedule of ``spec.job`` every ``interval_ms`` (stopped when 0): a run per agent partition on each tick."""
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
        if not spec.per_agent:
            return [RunRequest(run_key=f"{name}:{tick}", run_config=spec.run_config)]
        keys = context.instance.get_dynamic_partitions(AGENTS)
        if not keys:
            return SkipReason("no agent partitions yet: agent_partitions_sensor registers agents as they appear")
        return [
            RunRequest(run_key=f"{name}:{agent}:{tick}", partition_key=agent, run_config=spec.run_config)
            for agent in keys
        ]

    return _schedule


def build_schedules(settings: Settings) -> list[ScheduleDefinition]:
    """Every schedule, with intervals (and so default statuses) from ``settings``."""
    defaults = Settings()
    return [
        per_agent_schedule(spec, getattr(settings, spec.interval_field), getattr(defaults, spec.interval_field))
        for spec in SCHEDULED
    ]
