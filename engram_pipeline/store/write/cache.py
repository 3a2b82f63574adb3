"""The write path's view of each agent's rows, held in memory and checked against the table version.

The checks of a ``remember`` read the agent's stored rows (the exact-duplicate lookup, the nearest visible
neighbours), and as LanceDB queries those reads were the larger part of a single write. Here each agent the
write path touched is kept as what they need: per row its :data:`COLUMNS`, its unit vector and whether it is
visible. A view is used only at the table version it is labelled with: the write path's own appends move it
along, and any other commit brings it up to date first (:func:`_catch_up` of the rows changed since, or
:func:`_refresh` of the agent), within a budget of ``ENGRAM_WRITE_CACHE_ROWS`` rows. How it stays fresh, its
bounds and why: ``docs/scale.md``, "How the write cache stays fresh".

>>> cache = WriteCache(max_rows=10)
>>> cache.rows, cache.agents
(0, 0)
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipeline.store import one_trip
from engram_pipeline.store.engine import Engine
from engram_pipeline.store.shards import CREATED_AT, UPDATED_AT, Shard
from engram_pipeline.store.sql import eq, in_list, where_in
from engram_pipeline.visibility import is_visible

if TYPE_CHECKING:
    from engram_pipeline.embed import Embedder
    from engram_pipeline.model import Memory
    from engram_pipeline.store.appends import Appends


class _Host(Protocol):
    """What the cache reads of the store that holds it (the embedder's dimension, each shard's table and
    appends); narrower than :class:`~engram_pipeline.store.engine.Engine`, which holds the cache."""

    embedder: Embedder
    shards: tuple[Shard, ...]


class Writer(Engine, Protocol):
    """The engine as the write path uses it: an :class:`~engram_pipeline.store.engine.Engine` that holds a
    :class:`WriteCache`. The cache is not a member of ``Engine`` itself: the store's other modules import that
    protocol and know nothing of the write path (the ``acyclic`` contract in ``pyproject.toml``)."""

    write_cache: WriteCache


log = logging.getLogger(__name__)

# What the write-time checks read of a stored neighbour: the exact-duplicate race check (``content_hash``), the
# judge and the contradiction rules (``content``, ``kind``), the records of a contradiction (``id``), the
# compare-and-set of a collapse (``version``).
CHECKED = ("id", "agent_id", "content", "content_hash", "kind", "version")
# What a view keeps of a row: the checked columns and those the visibility rule reads.
COLUMNS = (*CHECKED, "status", "superseded_by")
IDLE_S = 30.0  # a view unused for this long may be evicted to admit another agent
CATCH_UP_WITH = 64  # other views a catch-up brings along (see WriteCache.views)
BROAD = 0.1  # a catch-up whose agents hold this share of the table filters on the rows' versions alone
MAX_AGENT_ROWS = 5_000  # in a table without row versions, an agent with more rows is checked against the table
FRAGMENTS = True  # catch-ups read only the fragments changed since (ChangedFragments); tests turn it off
SNAPSHOTS = 4  # fragment lists a shard's catch-ups may start from (see ChangedFragments)
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


class ChangedFragments:
    """Which fragments of one shard's ``memories`` may hold rows created or changed since a version: the
    catch-up reads those fragments only (:func:`_catch_up`), not the whole table.

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


class WriteCache:
    """The :class:`AgentView` of the agents the write path touched, by ``(shard, agent)``, within a row budget.

    Admission, not only eviction: once the budget is full, a view is evicted for a new agent only if it went
    unused for :data:`IDLE_S`. Agents written in a round that does not fit (more rows than the budget) are
    then read from the table, at the cost the write path had without the cache, instead of each write
    reading its agent whole only to evict the next agent's view."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._views: dict[int, OrderedDict[str, AgentView]] = {}  # per shard, least recently used first
        self._not_kept: dict[tuple[int, str], float] = {}  # agent -> until when its writes read the table
        self._fragments: dict[int, ChangedFragments] = {}  # per shard
        self._passed_to: dict[int, int] = {}  # per shard, the version its views were last passed over to
        self._lock = threading.Lock()
        self.loads = 0  # agents read whole
        self.refreshes = 0  # views brought up to date
        self.rereads = 0  # of those, views brought by reading their agent's (id, version) whole
        self.rows = 0  # rows held over all views

    def _largest(self, tracked: bool) -> int:
        """The most rows an agent's view may hold and be kept (in a table that does or does not keep its
        rows' versions)."""
        return self.max_rows // 2 if tracked else min(self.max_rows // 2, MAX_AGENT_ROWS)

    @property
    def agents(self) -> int:
        return sum(len(v) for v in self._views.values())

    def views(self, store: _Host, shard: int, version: int, agent_ids: Iterable[str]) -> dict[str, AgentView]:
        """The view of each of ``agent_ids`` (of ``shard``) at table version ``version``, read or brought up
        to date where needed; an agent the cache does not keep is left out (the caller reads the table)."""
        if self.max_rows <= 0:
            return {}
        now = time.monotonic()
        with self._lock:
            mine = self._views.setdefault(shard, OrderedDict())
            wanted = [a for a in dict.fromkeys(agent_ids) if self._not_kept.get((shard, a), 0.0) <= now]
            held = {a: mine.get(a) for a in wanted}
            # the room for new views (a sum over every view: only when an agent has none)
            new = any(v is None for v in held.values())
            room = self.max_rows - self.rows + self._idle_rows(now) if new else 0
            tracked = store.shards[shard].tracks_versions
            appends = store.shards[shard].appends
            if appends.last_unchanged > self._passed_to.get(shard, -1):  # not once per write: once per compaction
                _pass_over(appends, mine.values(), version)
                self._passed_to[shard] = version
            stale = [v for v in held.values() if v is not None and v.at != version]
            if stale and tracked:  # the same query brings the other views written lately: one, not one each
                stale += _lately_used((v for a, v in reversed(mine.items()) if a not in held), version, now)
        table = store.shards[shard].memories
        largest = self._largest(tracked)
        missing = [a for a, v in held.items() if v is None] if room > 0 else []
        fragments = self._fragments.setdefault(shard, ChangedFragments()) if tracked and FRAGMENTS else None
        self._count(_bring_to(store, table, stale, version, tracked=tracked, fragments=fragments))
        loaded = one_trip.run(_load(store, table, missing, version)) if missing else {}
        if loaded and fragments is not None:
            fragments.seen(table, version)
        self.loads += len(loaded)
        out: dict[str, AgentView] = {}
        with self._lock:
            for a in wanted:
                view = held[a] or loaded.get(a)
                if view is None:
                    continue
                view.used = now
                out[a] = view  # valid at ``version`` for this batch, kept or not
                if held[a] is not None and mine.get(a) is view:
                    mine.move_to_end(a)
                    if view.live > largest:
                        mine.pop(a)
                        self._not_kept[(shard, a)] = now + IDLE_S
                elif held[a] is not None:
                    pass  # evicted meanwhile (an append elsewhere ran over the budget): used, not kept
                elif view.live > largest:
                    self._not_kept[(shard, a)] = now + 10 * IDLE_S  # it will still be too big for a while
                elif not self._make_room(view.live, now):
                    self._not_kept[(shard, a)] = now + IDLE_S
                else:
                    mine[a] = view
            self._recount()
        return out

    def appended(
        self,
        shard: int,
        checked: int,
        committed: int,
        rows: Sequence[Memory],
        *,
        whole: Sequence[Memory | None] = (),
    ) -> None:
        """The write path appended ``rows`` to ``shard`` in commit ``committed``, after ``checked`` and commits
        that changed no row (the caller knows: :meth:`Appends.unchanged`): the views at ``checked`` are
        the table at ``committed`` once the rows are added. Views at another version are left as they are (they
        will be brought up to date when used). ``whole`` holds the rows as a read returns them, where known (kept
        for :meth:`AgentView.whole`)."""
        by_agent: dict[str, list[Memory]] = {}
        for row in rows:
            by_agent.setdefault(row["agent_id"], []).append(row)
        stored: dict[str, list[Memory]] = {}
        for row, read in zip(rows, whole, strict=False):
            if read is not None:
                stored.setdefault(row["agent_id"], []).append(read)
        with self._lock:
            for agent, view in self._views.get(shard, {}).items():
                if view.at != checked:
                    continue
                new = by_agent.get(agent, [])
                with view.lock:
                    if view.at != checked:  # brought up to date meanwhile, by a reader of the table
                        continue
                    if new:
                        view.add(new, np.asarray([r["vector"] for r in new], dtype=np.float32))
                        view.keep_whole(stored.get(agent, ()))
                    view.at = committed
            self._recount()
            while self.rows > self.max_rows and self._drop_oldest(float("inf")):
                pass

    def _count(self, brought: tuple[int, int]) -> None:
        self.refreshes += brought[0]
        self.rereads += brought[1]

    def clear(self) -> None:
        with self._lock:
            self._views.clear()
            self._not_kept.clear()
            self.rows = 0

    def _idle_rows(self, now: float) -> int:
        return sum(v.live for views in self._views.values() for v in views.values() if now - v.used > IDLE_S)

    def _recount(self) -> None:
        self.rows = sum(v.live for views in self._views.values() for v in views.values())

    def _make_room(self, rows: int, now: float) -> bool:
        """Evict views idle for :data:`IDLE_S`, least recently used first, until ``rows`` more fit."""
        self._recount()
        while self.rows + rows > self.max_rows:
            if not self._drop_oldest(now - IDLE_S):
                return False
        return True

    def _drop_oldest(self, used_before: float) -> bool:
        """Drop the least recently used view last used before ``used_before``; whether there was one."""
        firsts = [(views, next(iter(views))) for views in self._views.values() if views]  # each shard's LRU
        oldest = min(firsts, key=lambda va: va[0][va[1]].used, default=None)
        if oldest is None or oldest[0][oldest[1]].used >= used_before:
            return False
        views, agent = oldest
        self.rows -= views.pop(agent).live
        return True


def _pass_over(appends: Appends, views: Iterable[AgentView], version: int) -> None:
    """Move each of ``views`` (a shard's) to ``version`` where every commit since its own changed no row (the
    store's own compactions and index steps: :meth:`Appends.unchanged`), without reading anything:
    all of them, so that the appends that follow keep them all current (one version looked at per distinct
    version the views are at)."""
    behind: dict[int, list[AgentView]] = {}
    for view in views:
        if view.at < version:
            behind.setdefault(view.at, []).append(view)
    for at, group in behind.items():
        if appends.unchanged(at, version):
            for view in group:
                with view.lock:
                    if view.at == at:
                        view.at = version


def _lately_used(views: Iterable[AgentView], version: int, now: float) -> list[AgentView]:
    """Of ``views`` (most recently used first), those used in the last :data:`IDLE_S` and not at ``version``,
    at most :data:`CATCH_UP_WITH` of them."""
    out: list[AgentView] = []
    for view in views:
        if len(out) == CATCH_UP_WITH or now - view.used > IDLE_S:
            break
        if view.at != version:
            out.append(view)
    return out


def _bring_to(
    store: _Host,
    table: Any,
    views: Sequence[AgentView],
    version: int,
    *,
    tracked: bool,
    fragments: ChangedFragments | None = None,
) -> tuple[int, int]:
    """Bring ``views`` to ``version`` (under their locks, taken in agent order so that two callers cannot
    hold each other's; one already there meanwhile is skipped): through :func:`_catch_up` when the table
    keeps its rows' versions (reading only the ``fragments`` changed, where known), else (or where rows
    were deleted) through :func:`_refresh`. The number of views brought, and of those brought by
    :func:`_refresh`."""
    views = sorted(views, key=lambda v: v.agent_id)
    for view in views:
        view.lock.acquire()
    try:
        behind = [v for v in views if v.at != version]
        changed = fragments.since(table, min(v.at for v in behind), version) if fragments and behind else None
        reread = one_trip.run(_catch_up(table, behind, version, changed)) if tracked and behind else behind
        if reread:
            one_trip.run(_refresh(store, table, reread, version))
        return len(behind), len(reread)
    finally:
        for view in views:
            view.lock.release()


async def _catch_up(
    table: Any, stale: Sequence[AgentView], version: int, changed: tuple[Any, list[Any]] | None = None
) -> list[AgentView]:
    """Bring ``stale`` to ``version`` by reading their agents' rows created or changed since the oldest
    view's version, in one query. A deletion leaves no such row: the agents' row count, read in the same trip,
    is then below what their views hold once the rows are in, and each agent's own count names the views left
    for :func:`_refresh` (returned; also those of agents a row was added to after the count, to be safe).
    Which of the two reads sees the later version does not matter: a deletion either read misses leaves the
    count short at the next catch-up from the views' version.

    Where the agents hold at least :data:`BROAD` of the table, their filter picks nearly every row through
    the ``agent_id`` index before checking each one's versions, which costs more than the versions alone:
    then the query filters on the versions only, and the few rows of other agents it brings are dropped here.

    With ``changed`` (the dataset at ``version`` and its fragments that may hold such rows, from
    :class:`ChangedFragments`), both reads are of that dataset, and the query reads those fragments only.
    The query's cost is the table's fragments more than its rows (a scan opens each fragment's file)."""
    by_agent = {v.agent_id: v for v in stale}
    agents = f"agent_id IN {in_list(list(by_agent))}"
    since = min(v.at for v in stale)
    recent = f"({UPDATED_AT} > {since} OR {CREATED_AT} > {since})"
    found: pa.Table | None
    if changed is not None:
        dataset, fragments = changed
        columns = [*COLUMNS, "vector"]

        def count_rows(where: str) -> Coroutine[Any, Any, int]:
            return asyncio.to_thread(dataset.count_rows, where)

        where = f"{agents} AND {recent}"
        count, found = await one_trip.together(
            count_rows(agents),
            asyncio.to_thread(lambda: dataset.scanner(columns=columns, filter=where, fragments=fragments).to_table())
            if fragments
            else _nothing(),
        )
    else:

        def count_rows(where: str) -> Coroutine[Any, Any, int]:
            return one_trip.count(table, where)

        broad = sum(v.live for v in stale) >= BROAD * await one_trip.count(table)
        count, found = await one_trip.together(
            count_rows(agents),
            one_trip.rows(table, recent if broad else f"{agents} AND {recent}", columns=[*COLUMNS, "vector"]),
        )
        if broad:
            found = found.filter(pc.is_in(found.column("agent_id"), pa.array(list(by_agent), pa.string())))
    if found is not None:
        _add_table(by_agent, found)
    behind: list[AgentView] = []
    if int(count) != sum(v.live for v in stale):
        counts = await one_trip.together(*(count_rows(eq("agent_id", a)) for a in by_agent))
        behind = [v for v, n in zip(by_agent.values(), counts, strict=True) if int(n) != v.live]
    for view in stale:
        if view not in behind:
            view.at = version
    return behind


async def _nothing() -> None:
    return None


async def _load(store: _Host, table: Any, agents: Sequence[str], version: int) -> dict[str, AgentView]:
    """Each agent's rows read whole (their :data:`COLUMNS` and vector), as views at ``version``."""
    found = await one_trip.rows(table, f"agent_id IN {in_list(list(agents))}", columns=[*COLUMNS, "vector"])
    views = {a: AgentView(a, store.embedder.dimension, version) for a in agents}
    _add_table(views, found)
    return views


async def _refresh(store: _Host, table: Any, stale: Sequence[AgentView], version: int) -> None:
    """Bring each stale view to ``version``: read its agent's ``(id, version)`` (one query for all of them),
    drop the rows gone, read again the rows new or moved."""
    by_agent = {v.agent_id: v for v in stale}
    listed = await one_trip.rows(table, f"agent_id IN {in_list(list(by_agent))}", columns=["agent_id", "id", "version"])
    current: dict[str, dict[str, int]] = {a: {} for a in by_agent}
    for agent, memory_id, row_version in zip(
        *(listed.column(c).to_pylist() for c in ("agent_id", "id", "version")), strict=True
    ):
        current[agent][memory_id] = row_version
    changed: list[str] = []
    for agent, view in by_agent.items():
        now = current[agent]
        have = view.versions()
        view.remove([i for i in have if i not in now])
        changed += [i for i, v in now.items() if have.get(i) != v]
    for where in where_in("id", changed):
        found = await one_trip.rows(table, where, columns=[*COLUMNS, "vector"])
        _add_table(by_agent, found)
    for view in stale:
        view.at = version


def _add_table(views: Mapping[str, AgentView], found: Any) -> None:
    if not found.num_rows:
        return
    vectors = np.asarray(found.column("vector").combine_chunks().flatten(), dtype=np.float32).reshape(
        found.num_rows, -1
    )
    rows = list(zip(*(found.column(c).to_pylist() for c in COLUMNS), strict=True))
    by_agent: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_agent.setdefault(row[COLUMNS.index("agent_id")], []).append(i)
    for agent, idx in by_agent.items():
        views[agent].add_tuples([rows[i] for i in idx], vectors[idx])
