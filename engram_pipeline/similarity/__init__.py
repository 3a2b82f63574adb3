"""Neighbour graph (blocked k-NN over stored vectors) and the clustering every pass shares.

:func:`neighbour_graph` turns an agent's vectors into a table of pairs above a floor (exact up to
``exact_max_rows``, IVF-blocked above); :func:`components` and :func:`star_clusters` group those pairs.
"""

from engram_pipeline.similarity.clusters import components, star_clusters
from engram_pipeline.similarity.graph import PAIRS_SCHEMA, neighbour_graph

__all__ = ["PAIRS_SCHEMA", "components", "neighbour_graph", "star_clusters"]
