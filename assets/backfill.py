"""Backfill any asset over every agent partition or every shard (or some) from the command line.

This submits the same asset backfill the UI's "Materialize all partitions" does: a backfill record in the
instance, which the daemon turns into one run per partition (``make ui`` starts the daemon). Without a daemon
the backfill waits in the queue until one starts.

    python -m assets.backfill importance_decay                  # every agent partition
    python -m assets.backfill corpus_merge_plan --partitions coding-assistant,support-bot
    python -m assets.backfill importance_decay,memory_health --wait
    python -m assets.backfill shards/importance_decay             # every shard: all agents, a run per shard

``DAGSTER_HOME`` defaults to ``<ENGRAM_HOME>/dagster`` and may be relative (it is made absolute here).
Partitioned asset jobs can also be backfilled with Dagster's own command, which needs an absolute
``DAGSTER_HOME``: ``DAGSTER_HOME=$PWD/.engram/dagster dagster job backfill -w workspace.yaml -j <job> --all all
--noprompt``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from dagster import AssetKey, DagsterInstance, Definitions
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from assets.instance import prepare_environment

TERMINAL = {
    BulkActionStatus.COMPLETED,
    BulkActionStatus.COMPLETED_SUCCESS,
    BulkActionStatus.COMPLETED_FAILED,
    BulkActionStatus.FAILED,
    BulkActionStatus.CANCELED,
}


def launch_backfill(
    instance: DagsterInstance,
    defs: Definitions,
    assets: Sequence[str],
    *,
    partitions: Sequence[str] | None = None,
    title: str | None = None,
) -> str:
    """Submit a backfill of ``assets`` over ``partitions`` (default: all) and return its id."""
    keys = [AssetKey.from_user_string(a) for a in assets]
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=make_new_backfill_id(),
        asset_graph=defs.resolve_asset_graph(),
        partition_names=list(partitions) if partitions else None,
        asset_selection=keys,
        backfill_timestamp=time.time(),
        tags={"engram/launched_by": "assets.backfill"},
        dynamic_partitions_store=instance,
        all_partitions=not partitions,
        title=title,
        description=None,
        run_config=None,
    )
    instance.add_backfill(backfill)
    return backfill.backfill_id


def wait_for_backfill(instance: DagsterInstance, backfill_id: str, *, timeout: float = 3600) -> BulkActionStatus:
    """Poll until the backfill is done (the daemon must be running); return its final status."""
    deadline = time.monotonic() + timeout
    while True:
        backfill = instance.get_backfill(backfill_id)
        if backfill is None:
            raise LookupError(f"no backfill {backfill_id}")
        if backfill.status in TERMINAL:
            return backfill.status
        if time.monotonic() > deadline:
            raise TimeoutError(f"backfill {backfill_id} still {backfill.status.value} after {timeout}s")
        time.sleep(1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assets.backfill", description=__doc__.split("\n\n")[0])
    parser.add_argument("assets", help="comma-separated asset keys, e.g. importance_decay,memory_health")
    parser.add_argument(
        "--partitions", help="comma-separated agent ids or shard numbers (default: every agent, or every shard)"
    )
    parser.add_argument("--wait", action="store_true", help="wait until the daemon has finished the backfill")
    args = parser.parse_args(argv)
    # A relative DAGSTER_HOME (as in `DAGSTER_HOME=.engram/dagster`) is made absolute before Dagster sees it.
    env = prepare_environment()

    from assets.definitions import defs
    from assets.partitions import AGENTS, shards
    from assets.shard_assets import PREFIX

    assets = [a for a in args.assets.split(",") if a]
    by_shard = {AssetKey.from_user_string(a).path[0] == PREFIX for a in assets}
    if len(by_shard) > 1:
        print("error: backfill the shards/ assets and the per-agent assets separately", file=sys.stderr)
        return 1
    partitions = [p for p in (args.partitions or "").split(",") if p]
    with DagsterInstance.get() as instance:
        if by_shard == {True}:
            keys = shards.get_partition_keys()
            unknown = [p for p in partitions if p not in keys]
            if unknown:
                print(f"error: unknown shards: {', '.join(unknown)} (ENGRAM_SHARDS={len(keys)})", file=sys.stderr)
                return 1
        else:
            registered = set(instance.get_dynamic_partitions(AGENTS))
            unknown = [p for p in partitions if p not in registered]
            if unknown or not registered:
                what = f"unknown agent partitions: {', '.join(unknown)}" if unknown else "no agent partitions"
                print(
                    f"error: {what} in the Dagster instance at {env['DAGSTER_HOME']}. Agents are registered by "
                    "the agent_partitions_sensor (running under `make ui`) or by `make demo`.",
                    file=sys.stderr,
                )
                return 1
        backfill_id = launch_backfill(instance, defs, assets, partitions=partitions)
        print(f"backfill {backfill_id} submitted: {args.assets} over {args.partitions or 'all partitions'}")
        if not args.wait:
            return 0
        status = wait_for_backfill(instance, backfill_id)
        print(f"backfill {backfill_id}: {status.value}")
        return 0 if status in (BulkActionStatus.COMPLETED, BulkActionStatus.COMPLETED_SUCCESS) else 1


if __name__ == "__main__":
    sys.exit(main())
