"""Sensors: register every agent that appears in the store as an ``agents`` partition.

The cursor is the ``memories`` table version: while nothing was written the sensor skips without reading the
table; otherwise it lists the agents and adds the ones not registered yet. Every skip says why.
"""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SensorResult, SkipReason, sensor

from assets.partitions import AGENTS, agents
from assets.resources import EngramStore

# Dagster refuses partition keys with these; such an agent id is reported, not registered.
INVALID_KEY_PARTS = ("...", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")


@sensor(
    name="agent_partitions_sensor",
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Adds an `agents` partition for every agent id that has memories in the store.",
)
def agent_partitions_sensor(context: SensorEvaluationContext, engram: EngramStore) -> SensorResult | SkipReason:
    store = engram.open()
    version = str(store.engine.memories_version())
    if context.cursor == version:
        return SkipReason(f"memories unchanged since table version {version}")
    known = set(context.instance.get_dynamic_partitions(AGENTS))
    found = store.agents()
    bad = [a for a in found if any(part in a for part in INVALID_KEY_PARTS)]
    new = [a for a in found if a not in known and a not in bad]
    if not new:
        why = f"no new agents at table version {version} ({len(known)} registered"
        why += f"; {len(bad)} ids unusable as partition keys: {bad[:5]})" if bad else ")"
        return SensorResult(skip_reason=SkipReason(why), cursor=version)
    context.log.info(f"registering {len(new)} agents: {new[:20]}")
    return SensorResult(dynamic_partitions_requests=[agents.build_add_request(new)], cursor=version)
