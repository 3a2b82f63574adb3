"""Backfill any asset over every agent partition (or some) from the command line.

This submits the same asset backfill the UI's "Materialize all partitions" does: a backfill record in the
instance, which the daemon turns into one run per partition (``make ui`` starts the daemon). Without a daemon
the backfill waits in the queue until one starts.

    python -m assets.backfill importance_decay                  # every agent partition
    python -m assets.backfill corpus_merge_plan --partitions coding-assistant,support-bot
    python -m assets.backfill importance_decay,memory_health --wait

Partitioned asset jobs can also be backfilled with Dagster's own command:
``dagster job backfill -w workspace.yaml -j <job> --all all --noprompt``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from dagster import AssetKey, DagsterInstance, Definitions
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id

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
    parser.add_argument("--partitions", help="comma-separated agent ids (default: every registered agent)")
    parser.add_argument("--wait", action="store_true", help="wait until the daemon has finished the backfill")
    args = parser.parse_args(argv)

    from assets.definitions import defs

    partitions = [p for p in (args.partitions or "").split(",") if p]
    with DagsterInstance.get() as instance:
        backfill_id = launch_backfill(instance, defs, [a for a in args.assets.split(",") if a], partitions=partitions)
        print(f"backfill {backfill_id} submitted: {args.assets} over {args.partitions or 'all agent partitions'}")
        if not args.wait:
            return 0
        status = wait_for_backfill(instance, backfill_id)
        print(f"backfill {backfill_id}: {status.value}")
        return 0 if status in (BulkActionStatus.COMPLETED, BulkActionStatus.COMPLETED_SUCCESS) else 1


if __name__ == "__main__":
    sys.exit(main())
