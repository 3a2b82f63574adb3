"""The write path's view of each agent's rows, held in memory and checked against the table version.

The checks of a ``remember`` read the agent's stored rows (the exact-duplicate lookup, the nearest visible
neighbours), and as LanceDB queries those reads were the larger part of a single write. Here each agent the
write path touched is kept as what they need (an :class:`~.view.AgentView`). A view is used only at the table
version it is labelled with: the write path's own appends move it along, and any other commit brings it up to
date first (:func:`_catch_up` of the rows changed since, reading only the fragments :mod:`.fragments` names,
or :func:`_refresh` of the agent), within a budget of ``ENGRAM_WRITE_CACHE_ROWS`` rows. How it stays fresh,
its bounds and why: ``docs/scale.md``, "How the write cache stays fresh".

>>> cache = WriteCache(max_rows=10)
>>> cache.rows, cache.agents
(0, 0)
"""

from __future__ import annotations

import asyncio
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
from engram_pipeline.store.write.fragments import ChangedFragments
from engram_pipeline.store.write.view import COLUMNS, AgentView

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


IDLE_S = 30.0  # a view unused for this long may be evicted to admit another agent
CATCH_UP_WITH = 64  # other views a catch-up brings along (see WriteCache.views)
BROAD = 0.1  # a catch-up whose agents hold this share of the table filters on the rows' versions alone
MAX_AGENT_ROWS = 5_000  # in a table without row versions, an agent with more rows is checked against the table
FRAGMENTS = True  # catch-ups read only the fragments changed since (ChangedFragments); tests turn it off


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
    """Each agent's rows read whole (their :data:`~.view.COLUMNS` and vector), as views at ``version``."""
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
