"""Neighbour graph (blocked k-NN over stored vectors) and the clustering every pass shares.

:func:`neighbour_graph` turns an agent's vectors into a table of pairs above a floor (exact up to
``exact_max_rows``, IVF-blocked above); :func:`components` and :func:`star_clusters` group those pairs,
:func:`average_linkage` a small dense similarity matrix.
"""

from engram_pipeline.similarity.clusters import average_linkage, components, star_clusters
from engram_pipeline.similarity.graph import PAIRS_SCHEMA, neighbour_graph

__all__ = ["PAIRS_SCHEMA", "average_linkage", "components", "neighbour_graph", "star_clusters"]
