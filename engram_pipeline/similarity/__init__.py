"""Neighbour graph (blocked k-NN over stored vectors) and the clustering every pass shares.

:func:`neighbour_graph` turns an agent's vectors into a table of pairs above a floor (exact up to
``exact_max_rows``, IVF-blocked above), :func:`nearest_graph` only each row's nearest of them
(:func:`nearest_per_row` cuts a graph the same way); :func:`components` and :func:`star_clusters` group those pairs,
:func:`average_linkage` a small dense similarity matrix.
"""

from engram_pipeline.similarity.clusters import average_linkage, components, star_clusters
from engram_pipeline.similarity.graph import PAIRS_SCHEMA, neighbour_graph
from engram_pipeline.similarity.nearest import nearest_graph, nearest_per_row

__all__ = [
    "PAIRS_SCHEMA", "average_linkage", "components", "nearest_graph", "nearest_per_row", "neighbour_graph",
    "star_clusters",
]  # fmt: skip
