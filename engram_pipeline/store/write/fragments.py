"""Which fragments of a shard's ``memories`` may hold rows created or changed since a version, from the fragment
lists of the versions the write cache read at: its catch-up reads those fragments only, not the whole table
(``docs/scale.md``, "How the write cache stays fresh").
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

log = logging.getLogger(__name__)

SNAPSHOTS = 4  # fragment lists a shard's catch-ups may start from (see ChangedFragments)


class ChangedFragments:
    """Which fragments of one shard's ``memories`` may hold rows created or changed since a version: the
    catch-up reads those fragments only (:func:`.cache._catch_up`), not the whole table.

    Lance writes a row anew, in a new fragment, whenever it is created or changed (an update, a
    ``merge_insert``, a compaction's rewrite); a deletion writes the fragment's new deletion file. So a
    fragment whose data files, deletion file and rows' version records are as they were at version ``s``
    holds no row created or changed after ``s``, and the others (new ones, and those whose deletion file
    moved) are a superset of where such rows are. Fragment ids are never reused. The fragment lists of the
    last :data:`SNAPSHOTS` versions the cache read at are kept (cheap to take: docs/scale.md);
    a catch-up from ``since`` diffs against the latest one at or before ``since``. With none, the catch-up
    reads the whole table and takes one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dataset: Any = None  # the table's Lance dataset, checked out at each version asked; False: none
        self._prints: OrderedDict[int, dict[int, tuple[Any, ...]]] = OrderedDict()  # version -> fragment prints

    def since(self, table: Any, since: int, version: int) -> tuple[Any, list[Any]] | None:
        """The dataset at ``version`` and its fragments that may hold rows created or changed after ``since``,
        or None when no fragment list at or before ``since`` is kept (or the table cannot be opened as a Lance
        dataset). Keeps the list at ``version`` either way."""
        with self._lock:
            base = max((v for v in self._prints if v <= since), default=None)
            prints = self._prints[base] if base is not None else None
        at = self._at(table, version)
        if prints is None or at is None:
            return None
        dataset, now = at
        return dataset, [f for f in dataset.get_fragments() if prints.get(f.fragment_id) != now[f.fragment_id]]

    def seen(self, table: Any, version: int) -> None:
        """Keep the fragment list at ``version`` (a version views were read or brought up to date at)."""
        self._at(table, version)

    def _at(self, table: Any, version: int) -> tuple[Any, dict[int, tuple[Any, ...]]] | None:
        with self._lock:
            if self._dataset is False:
                return None
            try:
                if self._dataset is None:
                    self._dataset = table.to_lance()
                dataset = self._dataset.checkout_version(version)
            except (ValueError, OSError, NotImplementedError):  # memory:// (lance cannot open lancedb's)
                log.debug("catch-ups read the whole table: its Lance dataset does not open", exc_info=True)
                self._dataset = False  # a cost, not a correctness matter: the whole-table catch-up is exact
                return None
        now = {f.fragment_id: _print(f.metadata) for f in dataset.get_fragments()}
        with self._lock:
            self._prints[version] = now
            self._prints.move_to_end(version)
            while len(self._prints) > SNAPSHOTS:
                self._prints.popitem(last=False)
        return dataset, now


def _print(fragment: Any) -> tuple[Any, ...]:
    """What of a fragment's metadata changes when any of its rows is written or deleted (see
    :class:`ChangedFragments`)."""
    versions = (fragment.created_at_version_meta, fragment.last_updated_at_version_meta)
    return (
        tuple(f.path for f in fragment.files),
        repr(fragment.deletion_file),
        *(None if meta is None else meta.json() for meta in versions),
        repr(fragment.overlays),
    )
