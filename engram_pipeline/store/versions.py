"""How many versions of a table the store keeps between maintenance runs, and the clean-up that keeps them so.

Every commit adds a version (a manifest in ``_versions``), and on a local directory Lance finds the latest
version by listing that directory: every read under the store's strong consistency, every LanceDB append and
every version check grows with the versions kept. ``maintain`` cleans up versions older than an hour, and a
compaction through lancedb's ``optimize`` keeps a week of them, so under a steady stream of commits (single
writes to ``memories``; a server's access-log appends, once a second; a sweep's cursors, per agent) their
number grew with the commits since the last maintenance run, and with it the cost of a single write
(``docs/scale.md``, "How the write path was measured").

So every :data:`CLEAN_EVERY` commits to a table the store calls :func:`clean_old_versions`, which keeps the last
:data:`KEEP_VERSIONS` and any younger than :data:`VERSIONS_MIN_AGE` (a read that began at an older version and
runs longer than that may find a file a compaction replaced gone). ``memories`` does so in its background
compaction thread (:mod:`.write.compaction`), the side tables in line (:class:`.maintenance.FragmentBound`).
Time travel to an older version is what a pass resumed after a kill uses to decide as its first attempt did;
without it, the pass decides from the rows as they are
(:meth:`engram_pipeline.lifecycle._common.PassCursor.at_start`), as it does after ``maintain``.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

CLEAN_EVERY = 256  # commits to a table between two clean-ups of its old versions
KEEP_VERSIONS = 256  # versions a clean-up keeps, the latest ones (besides those younger than VERSIONS_MIN_AGE)
VERSIONS_MIN_AGE = timedelta(seconds=10)


def clean_old_versions(table: Any) -> bool:
    """Remove the versions of ``table`` but the last :data:`KEEP_VERSIONS` and those younger than
    :data:`VERSIONS_MIN_AGE`. Deletes files, commits nothing: no writer waits for it. False when nothing was
    cleaned: a table with no Lance dataset to clean (``memory://``), or a failure (logged; a cost, never a
    correctness matter: the next clean-up tries again)."""
    try:
        dataset = table.to_lance()
    except Exception:  # an in-memory table keeps no versions on disk
        return False
    try:
        dataset.cleanup_old_versions(
            older_than=VERSIONS_MIN_AGE, retain_versions=KEEP_VERSIONS, error_if_tagged_old_versions=False
        )
        return True
    except Exception:
        log.exception("clean-up of old versions of %s failed", getattr(table, "name", table))
        return False
