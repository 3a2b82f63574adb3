"""Stores as older releases left them, for the tests of what the store does with them."""

from __future__ import annotations

import lancedb

from engram_pipeline.model import memory_schema


def pre_row_versions(uri: str, dimension: int) -> None:
    """Make, at ``uri``, the ``memories`` table of a one-shard store as it was made before it had stable row
    ids (so before Lance kept its rows' versions); open the store on it afterwards."""
    lancedb.connect(uri).create_table("memories", schema=memory_schema(dimension))
