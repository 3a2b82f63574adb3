"""The neighbour graph: the similar pairs of one agent's memories, computed once per run.

Contradiction detection, the corpus merge plan, confidence decay and episode clustering all start from it;
it travels to them through ``run_scoped_io_manager`` (see ``resources.py``).
"""

import time

import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetExecutionContext, MetadataValue, Output, asset

from assets._report import round_float
from assets.maintenance_assets import importance_decay
from assets.partitions import PASS_RETRY, agents
from assets.resources import EngramStore
from engram_pipeline.lifecycle.graph import agent_graph, graph_floor


@asset(
    partitions_def=agents,
    # Built after decay has pruned, so the passes of a full run compare only rows that are still there.
    deps=[importance_decay],
    io_manager_key="run_scoped_io_manager",
    retry_policy=PASS_RETRY,
    group_name="graph",
    kinds={"lancedb", "numpy"},
)
def neighbour_graph(context: AssetExecutionContext, engram: EngramStore) -> Output[pa.Table]:
    """Pairs (src_id, dst_id, score) of the agent's visible memories above the lowest floor any pass needs."""
    store = engram.open()
    start = time.perf_counter()
    graph = agent_graph(store, context.partition_key)
    scores = graph["score"]
    return Output(
        graph,
        metadata={
            "pairs": MetadataValue.int(graph.num_rows),
            "floor": MetadataValue.float(round_float(graph_floor(store.settings))),
            "mean_score": MetadataValue.float(round_float(float(pc.mean(scores).as_py() or 0.0))),
            "duration_s": MetadataValue.float(round(time.perf_counter() - start, 3)),
        },
    )
