"""The write path's appends to a shard's ``memories``, and its latest version, without listing the table.

On a local directory Lance finds a table's latest version by listing its ``_versions`` directory, and the
store's strong consistency makes every LanceDB call on the table do that first: a version read is one listing,
a ``table.add`` four. A listing grows with the versions kept, so the write path's cost grew with the writes
since the last clean-up (measured in ``docs/scale.md``, "How the write path was measured"). Here each shard
keeps a Lance dataset at the version this process last knew to be the latest:

- :meth:`Appends.latest` looks for the manifest of the version after it, and the one after that while they
  exist (one ``stat`` each on a local directory; Lance names version ``v``'s manifest
  ``_versions/{2**64 - 1 - v:020d}.manifest``, or ``{v}.manifest`` in tables made before that scheme): the
  last found is the latest, and the held dataset moves there. On object storage, where a listing of that
  directory is one request whatever its length, the version is read by listing.
- :meth:`Appends.append` appends through the held dataset: Lance commits the next version without a listing
  when no other commit took it (it rebases onto one that did, as any append does).
- :meth:`Appends.held_back` runs a block (the store's own compaction's commits) with this process's appends
  held back, and records the commits it made that change no row (a compaction's rewrite, an index step), once
  it has checked that the table moved by exactly those commits (their transactions read back): the write
  cache's views then pass over those versions without reading anything, and an append whose check read the
  version before them needs no second look for a racing insert (after each compaction those two reads were
  the slowest single writes at 100k rows).

A table the dataset cannot be opened for (``memory://``) reads and appends through LanceDB as before.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from engram_pipeline.store import one_trip

log = logging.getLogger(__name__)

_LAST = 2**64 - 1  # Lance's version-2 manifest names count down from here


class Appends:
    """The appends and the latest version of one ``memories`` table (see the module)."""

    def __init__(self, table: Any) -> None:
        self._memories = table
        self._lock = threading.Lock()
        self._dataset: Any = None  # the held Lance dataset; False: none (not a local Lance directory)
        self._name: Any = None  # version -> the path of its manifest, once the naming scheme is known
        self._unchanged: set[int] = set()  # versions known to have changed no row (the latest UNCHANGED_KEPT)
        self._order: deque[int] = deque()

    def latest(self) -> int:
        """The table's latest version (see the module)."""
        with self._lock:
            return self._latest()

    def append(self, data: pa.Table) -> int:
        """Append ``data`` (rows of the table's schema) in one commit; returns the version it made."""
        with self._lock:
            dataset = self._held()
            if dataset is not None:
                try:
                    dataset.insert(data)
                except Exception:  # opened again at the latest version for the retry
                    self._dataset = None
                    raise
                return int(dataset.version)
        return int(self._memories.add(data).version)

    @contextmanager
    def held_back(self, *, kinds: tuple[str, ...] = ()) -> Iterator[None]:
        """Hold this process's appends to the table back while the block runs: a commit made in it (the store's
        own compaction's) meets none of them, where it used to lose its commit to them time after time.

        ``kinds`` names the commits the block makes, in order, when they change no row (``Rewrite``, a
        compaction's, after a ``ReserveFragments``; ``CreateIndex``, an index step's): when the table moved by
        exactly those commits, their versions are recorded as changing no row (:meth:`unchanged`), so that the
        write path's views, its version check and its race check pass over them without reading anything."""
        with self._lock:
            before = self._latest()
            yield
            if kinds:
                after = self._latest()
                if after - before == len(kinds) and self._made_of(before, kinds):
                    self._order.extend(range(before + 1, after + 1))
                    self._unchanged.update(range(before + 1, after + 1))
                    while len(self._order) > UNCHANGED_KEPT:
                        self._unchanged.discard(self._order.popleft())

    @property
    def last_unchanged(self) -> int:
        """The latest version recorded as changing no row (-1: none yet)."""
        order = self._order
        return order[-1] if order else -1

    def unchanged(self, since: int, until: int) -> bool:
        """Whether every version after ``since`` up to ``until`` is known to have changed no row."""
        known = self._unchanged  # read without the lock: a version is only ever added, or dropped when old
        return all(v in known for v in range(since + 1, until + 1))

    def _latest(self) -> int:
        """:meth:`latest`, with the lock held: the held version, then each next manifest that exists (one
        ``stat`` each); read by listing where manifests cannot be looked for. The held dataset moves there."""
        dataset = self._held()
        if dataset is None or self._name is None:
            version = int(one_trip.run(one_trip.version(self._memories)))
        else:
            version = int(dataset.version)
            while os.path.exists(self._name(version + 1)):
                version += 1
        if dataset is not None and int(dataset.version) < version:
            self._dataset = dataset.checkout_version(version)
        return version

    def _made_of(self, before: int, kinds: tuple[str, ...]) -> bool:
        """Whether the commits after ``before`` are, in order, Lance operations named ``kinds`` (a reserve of
        fragment ids has no Python class of its own: ``BaseOperation``)."""
        dataset = self._held()
        if dataset is None:
            return False
        try:
            made = [dataset.read_transaction(before + 1 + k) for k in range(len(kinds))]
        except Exception:  # a transaction pylance cannot read back (some index rewrites): not known
            return False
        return all(
            t is not None and type(t.operation).__name__ == _OPERATION.get(kind, kind)
            for t, kind in zip(made, kinds, strict=True)
        )

    def _held(self) -> Any:
        """The held dataset (opened on first use), or None when the table has none."""
        if self._dataset is None:
            try:
                self._dataset = self._memories.to_lance()
            except (ValueError, OSError, NotImplementedError):  # memory://: LanceDB's own calls, as before
                log.debug("appends go through LanceDB: the table's Lance dataset does not open", exc_info=True)
                self._dataset = False
                return None
            self._name = _naming(self._dataset)
        return None if self._dataset is False else self._dataset  # not ``or``: a dataset's truth is its length


UNCHANGED_KEPT = 4096  # the most recent versions known to have changed no row that are remembered
_OPERATION = {"ReserveFragments": "BaseOperation"}  # the Python class pylance reads each operation back as


def _naming(dataset: Any) -> Any:
    """version -> its manifest's path, for a dataset in a local directory whose current manifest is found under
    one of Lance's two naming schemes; None otherwise (the version is then read by listing)."""
    uri = str(dataset.uri)
    if "://" in uri and not uri.startswith("file://"):
        return None
    versions = os.path.join(uri.removeprefix("file://"), "_versions")

    def v2(version: int) -> str:
        return os.path.join(versions, f"{_LAST - version:020d}.manifest")

    def v1(version: int) -> str:
        return os.path.join(versions, f"{version}.manifest")

    current = int(dataset.version)
    return next((scheme for scheme in (v2, v1) if os.path.exists(scheme(current))), None)
