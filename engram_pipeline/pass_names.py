"""What the shells call each lifecycle pass: its Dagster asset, its ``engram`` command, its HTTP route.

The registry (:data:`engram_pipeline.lifecycle.passes.PASSES`) names each pass once; a pass is also published
under names that callers and Dagster's history hold (an asset key carries its materialization history, a
command and a route are in scripts and clients), so they keep their spelling, and this table is the one place
that says which belongs to which pass. The CLI registers its pass commands, the API its pass routes and the
code location its shard sweeps under these names. It lives apart from the registry, without imports, so that
``engram --help`` reads it without importing the passes.

>>> PASS_NAMES["ltm_decay"]
PassNames(asset='importance_decay', command='decay', route='decay')
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PassNames:
    asset: str | None  # its Dagster asset: the per-agent asset and/or the shard sweep (shards/<asset>)
    command: str | None  # its ``engram`` command
    route: str | None  # its HTTP route, /v1/agents/{agent_id}/<route>


# One entry per pass of the registry, under the registry's name (tests hold the two together).
PASS_NAMES: dict[str, PassNames] = {
    "stm_promotion": PassNames(asset="stm_promotion", command="promote", route="promote"),
    "ltm_decay": PassNames(asset="importance_decay", command="decay", route="decay"),
    # over HTTP, POST .../decay with {"confidence": true}
    "confidence_decay": PassNames(asset="confidence_decay", command="decay-confidence", route=None),
    "contradictions": PassNames(asset="contradictions", command="contradictions", route=None),
    "archival": PassNames(asset="archival", command=None, route=None),
    "consolidation": PassNames(asset="consolidation", command="consolidate", route="consolidate"),
    "corpus_merge": PassNames(asset="corpus_merge_plan", command="consolidate-corpus", route="corpus-merge"),
    "health": PassNames(asset="memory_health", command="health", route="health"),
    "pipeline": PassNames(asset="pipeline", command=None, route=None),
}
