"""The code location: every asset, check, job, schedule, sensor and resource, gathered in one place."""

from dagster import Definitions, in_process_executor, load_assets_from_modules

from assets import consolidation_assets, graph_assets, health_assets, hygiene_assets, maintenance_assets, shard_assets
from assets.checks import invariant_checks
from assets.jobs import all_jobs
from assets.resources import engram_resources
from assets.schedules import build_schedules
from assets.sensors import agent_partitions_sensor
from engram_pipeline.settings import Settings

ASSET_MODULES = [graph_assets, maintenance_assets, hygiene_assets, consolidation_assets, health_assets, shard_assets]

defs = Definitions(
    assets=load_assets_from_modules(ASSET_MODULES),
    asset_checks=invariant_checks,
    jobs=all_jobs,
    schedules=build_schedules(Settings.from_env()),
    sensors=[agent_partitions_sensor],
    resources=engram_resources(),
    # A run is one shard or one agent: its passes run one after another in one process; parallelism comes from
    # the run queue (several shards' or agents' runs at once), which suits thin steps on a few cores.
    executor=in_process_executor,
)
