"""One agent's rows as the write path's checks read them, held in memory: an :class:`AgentView`.

Per row its :data:`COLUMNS` (a tuple: a dict per row took several times the memory and the load time), its unit
vector and whether recall would show it, with a map from content hash to rows; the search is exact cosine over
the visible rows. The write cache (:mod:`.cache`) keeps one per agent and keeps it at the table's version.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from engram_pipeline.visibility import is_visible

if TYPE_CHECKING:
    from engram_pipeline.model import Memory

# What the write-time checks read of a stored neighbour: the exact-duplicate race check (``content_hash``), the
# judge and the contradiction rules (``content``, ``kind``), the records of a contradiction (``id``), the
# compare-and-set of a collapse (``version``).
CHECKED = ("id", "agent_id", "content", "content_hash", "kind", "version")
# What a view keeps of a row: the checked columns and those the visibility rule reads.
COLUMNS = (*CHECKED, "status", "superseded_by")
WHOLE_ROWS = 256  # whole rows a view keeps of the rows appended lately (AgentView.whole)

_ID, _HASH, _VERSION, _STATUS, _SUPERSEDED_BY = (
    COLUMNS.index(c) for c in ("id", "content_hash", "version", "status", "superseded_by")
)


class AgentView:
    """One agent's rows as the write path checks against them (see the module); grows by doubling. A row is
    kept as a tuple of its :data:`COLUMNS` (a dict per row took several times the memory and the load time)."""

    def __init__(self, agent_id: str, dimension: int, at: int) -> None:
        self.agent_id = agent_id
        self.at = at  # the table version this view is the agent's rows of
        self.lock = threading.Lock()  # held to change the view or to read it (add, remove, search)
        self.used = 0.0  # time.monotonic() of its last use
        self.n = 0  # slots used (live and dead)
        self.live = 0
        self._vectors = np.zeros((16, dimension), dtype=np.float32)
        self._visible = np.zeros(16, dtype=bool)
        self._rows: list[tuple[Any, ...] | None] = []
        self._slot: dict[str, int] = {}  # id -> its slot
        self._by_hash: dict[str, list[int]] = {}
        # The whole rows, as a read returns them, of the rows this process appended lately (at most WHOLE_ROWS,
        # newest kept): an exact duplicate of one is answered with it instead of a read by id. A row is dropped
        # from here whenever it is replaced or removed, so what is here is the row at the view's version.
        self._whole: OrderedDict[str, Memory] = OrderedDict()

    def add(self, rows: Sequence[Mapping[str, Any]], vectors: np.ndarray) -> None:
        """Add ``rows`` (dicts with at least the :data:`COLUMNS`) with their ``vectors``."""
        self.add_tuples([tuple(row.get(c) for c in COLUMNS) for row in rows], vectors)

    def add_tuples(self, rows: Sequence[tuple[Any, ...]], vectors: np.ndarray) -> None:
        """Add ``rows`` (tuples of the :data:`COLUMNS`, in order) with their ``vectors``; a row already held
        is replaced."""
        self.remove([row[_ID] for row in rows])
        if self.n - self.live > max(self.live, 64):
            self._pack()
        need = self.n + len(rows)
        if need > len(self._visible):
            cap = max(need, 2 * len(self._visible))
            grown = np.zeros((cap, self._vectors.shape[1]), dtype=np.float32)
            grown[: self.n] = self._vectors[: self.n]
            self._vectors = grown
            self._visible = np.concatenate([self._visible[: self.n], np.zeros(cap - self.n, dtype=bool)])
        if len(rows):
            v = np.asarray(vectors, dtype=np.float32).reshape(len(rows), -1)
            norms = np.linalg.norm(v, axis=1, keepdims=True)
            self._vectors[self.n : need] = v / np.where(norms > 0, norms, np.float32(1.0))
        for slot, row in enumerate(rows, start=self.n):
            self._rows.append(row)
            self._slot[row[_ID]] = slot
            self._by_hash.setdefault(row[_HASH], []).append(slot)
            self._visible[slot] = is_visible({"status": row[_STATUS], "superseded_by": row[_SUPERSEDED_BY]})
        self.n = need
        self.live += len(rows)

    def remove(self, ids: Iterable[str]) -> None:
        for memory_id in ids:
            slot = self._slot.pop(memory_id, None)
            if slot is None:
                continue
            row = self._rows[slot]
            assert row is not None
            same = self._by_hash[row[_HASH]]
            same.remove(slot)
            if not same:
                del self._by_hash[row[_HASH]]
            self._rows[slot] = None
            self._visible[slot] = False
            self._whole.pop(memory_id, None)
            self.live -= 1

    def keep_whole(self, rows: Iterable[Memory]) -> None:
        """Keep ``rows`` (held in the view, each as a read of the table returns it) for :meth:`whole`."""
        for row in rows:
            if row["id"] in self._slot:
                self._whole[row["id"]] = row
                self._whole.move_to_end(row["id"])
        while len(self._whole) > WHOLE_ROWS:
            self._whole.popitem(last=False)

    def whole(self, memory_id: str) -> Memory | None:
        """A copy of the whole row ``memory_id`` as the table holds it at the view's version, if kept."""
        with self.lock:
            row = self._whole.get(memory_id)
            return None if row is None else dict(row)

    def _pack(self) -> None:
        """Drop the slots of removed rows (they pile up as refreshes replace moved rows)."""
        keep = np.asarray(sorted(self._slot.values()), dtype=np.int64)
        self._vectors = self._vectors[keep]
        self._visible = self._visible[keep]
        rows = [self._rows[s] for s in keep]
        self._rows = rows
        self._slot = {row[_ID]: j for j, row in enumerate(rows)}
        self._by_hash = {}
        for j, row in enumerate(rows):
            self._by_hash.setdefault(row[_HASH], []).append(j)
        self.n = len(keep)

    def versions(self) -> dict[str, int]:
        """``id -> version`` of every row held."""
        return {memory_id: int(self._rows[slot][_VERSION]) for memory_id, slot in self._slot.items()}  # type: ignore[index]

    def ids_with_hash(self, digest: str) -> list[str]:
        """The ids of the rows (visible or not) whose content hash is ``digest``."""
        with self.lock:
            return [self._rows[s][_ID] for s in self._by_hash.get(digest, ())]  # type: ignore[index]

    def nearest(self, vectors: Sequence[Sequence[float]], k: int) -> list[list[dict[str, Any]]]:
        """The ``k`` visible rows nearest to each of ``vectors`` by cosine, best first, each as its
        :data:`CHECKED` columns with ``_similarity``."""
        with self.lock:
            return self._nearest(vectors, k)

    def _nearest(self, vectors: Sequence[Sequence[float]], k: int) -> list[list[dict[str, Any]]]:
        visible = self._visible[: self.n]
        shown = int(visible.sum())
        if not shown or not len(vectors):
            return [[] for _ in vectors]
        q = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
        norms = np.linalg.norm(q, axis=1, keepdims=True)
        q = (q / np.where(norms > 0, norms, np.float32(1.0))).astype(np.float32, copy=False)
        # every slot, then the hidden ones set below any cosine: gathering the visible rows' vectors first
        # copied the whole matrix (15 MB and several ms at 10k rows) on every search
        cos = q @ self._vectors[: self.n].T  # (queries, slots)
        cos[:, ~visible] = -np.inf
        take = min(k, shown)
        top = (
            np.argpartition(-cos, take - 1, axis=1)[:, :take]
            if take < self.n
            else np.tile(np.arange(take), (len(q), 1))
        )
        out = []
        for qi in range(len(q)):
            order = top[qi][np.argsort(-cos[qi, top[qi]], kind="stable")]
            hits = []
            for j in order:
                row = self._rows[int(j)]
                assert row is not None and visible[j]
                hits.append({**dict(zip(CHECKED, row, strict=False)), "_similarity": float(cos[qi, j])})
            out.append(hits)
        return out
