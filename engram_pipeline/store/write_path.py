"""The write path of ``remember``: group commit, exact and semantic dedup, contradiction handling.

``MemoryStore.remember`` validates and embeds, then hands the row to the store's group commit
(:mod:`engram_pipeline.store.group_commit`): the writes of one process that arrive while a batch commits are
checked and inserted together by :func:`remember_batch`, in one commit. Exact duplicates (per agent, the
normalised content hash) are found for the whole batch in one read through the BTree index on
``content_hash``, at the same time as the nearest visible neighbours of the batch's rows are searched (both
in one trip through lancedb's event loop: :mod:`engram_pipeline.store.one_trip`). Then the new row's
nearest visible neighbours of the same agent decide:

* the store's merge judge (:func:`engram_pipeline.judge.same_fact`, the decision the corpus merge uses)
  calls the pair a duplicate: the write collapses into the existing row, which gains a
  ``duplicate_matches`` entry, a reinforcement and a fresh importance score; nothing new is inserted and
  the outcome is ``semantic_duplicate``. The collapses of a batch are one compare-and-set (one per write
  made writers whose writes all collapsed commit one after another: ``docs/scale.md``);
* similarity in [``MEMORY_CONTRADICTION_THRESHOLD``, ``..._MAX``) and the rules of
  :mod:`engram_pipeline.claims` fire: policy ``flag`` marks both rows ``contradicted`` (both stay in recall)
  with a ``contradicts`` link; policy ``supersede`` hides the older row behind the new one, audited.

Both reads stay bounded as the table grows because the store compacts and re-indexes itself once writes
have left enough small fragments (:mod:`engram_pipeline.store.self_compaction`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from engram_pipeline.model import Memory, confidence_of, dumps_metadata, loads_metadata, rows_to_table, utcnow
from engram_pipeline.scoring import importance_of, reinforce
from engram_pipeline.store import one_trip
from engram_pipeline.store.access_log import overlay_pending
from engram_pipeline.store.errors import MemoryNotFound, StoreError, VersionConflict
from engram_pipeline.store.group_commit import GroupCommit
from engram_pipeline.store.marks import apply_contradictions
from engram_pipeline.store.results import RememberResult
from engram_pipeline.store.retry import with_retry
from engram_pipeline.store.self_compaction import after_commit
from engram_pipeline.store.sql import eq, where_in
from engram_pipeline.store.write_cache import CHECKED, AgentView
from engram_pipeline.store.write_checks import Found, decide_many, near_cosine
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.store.engine import Engine

NEIGHBOURS = 8
# A search returning whole rows materialises every column of each hit, 1.6x the time of the CHECKED columns
# at 100k rows with the vector index (bench/profile_remember.py); a batch's collapses read their rows whole
# (``_collapse``).


def visible_neighbours(store: Engine, agent_id: str, vector: list[float], k: int = NEIGHBOURS) -> list[Memory]:
    """The ``k`` nearest rows of the agent that recall would show, each with ``_similarity`` (without their
    vectors: :func:`stored_columns`)."""
    return many_visible_neighbours(store, agent_id, [vector], k)[0]


def many_visible_neighbours(
    store: Engine, agent_id: str, vectors: Sequence[list[float]], k: int = NEIGHBOURS
) -> list[list[Memory]]:
    """:func:`visible_neighbours` of several vectors of one agent, in one query (a multi-vector search is
    several times cheaper than as many single ones)."""
    return one_trip.run(_many_visible_neighbours(store, agent_id, vectors, k))


async def _many_visible_neighbours(
    store: Engine,
    agent_id: str,
    vectors: Sequence[list[float]],
    k: int = NEIGHBOURS,
    columns: Sequence[str] | None = None,
) -> list[list[Memory]]:
    where = f"{eq('agent_id', agent_id)} AND {VISIBLE_SQL}"
    table = store.shard_for(agent_id).memories
    hits = (await one_trip.nearest(table, vectors, where, k=k, columns=columns)).to_pylist()
    out: list[list[Memory]] = [[] for _ in vectors]
    for h in hits:
        h["_similarity"] = 1.0 - float(h.pop("_distance"))
        out[int(h.pop("query_index", 0))].append(h)
    return out


def stored_columns(store: Engine) -> list[str]:
    """The columns a write's checks read of a stored neighbour: all but its vector (the cosine is computed,
    and a neighbour's vector is several times the rest of the row to read)."""
    return [f.name for f in store.memory_schema if f.name != "vector"]


Item = tuple[Memory, str]
"""A write handed to the group commit: the new row (with its vector) and the actor writing it."""


def new_write_group(store: Engine) -> GroupCommit[Item, RememberResult]:
    """A group commit that batches the ``remember`` calls of one process (see :mod:`.group_commit`). The
    store keeps one per shard: a batch commits to one table, and writers of different shards never wait for
    one another's batch."""
    return GroupCommit(lambda items: remember_batch(store, items))


def remember_batch(store: Engine, items: Sequence[Item], *, rounds: int = 3) -> list[RememberResult | BaseException]:
    """The write-time checks and the insert of a batch of new rows, as if written one after another in order,
    in one commit where the rows do not touch one another.

    Exact duplicates against the store are found in one read for the whole batch; a row whose content an
    earlier row of the batch has gets that row's result (``exact_duplicate`` of it once inserted; unless
    that row collapsed, below). A row close enough to a row of the batch not yet inserted that the judge
    would merge the pair or the contradiction rules flag it first commits the rows before it, so its checks
    see them in the store. The rest of the batch goes in one commit; contradictions found are recorded
    after it. A failure of one row is returned for that row; nothing of a row that fails validation was
    ever queued (``new_row`` runs first).

    The near duplicates of stored rows are decided in order but collapse together, in one compare-and-set
    with each commit of the batch's rows (after the insert, before the contradictions are recorded: see
    :meth:`_Pending.flush`). Deciding before the fold commits decides as after it: a collapse changes a
    row's metadata, importance and version, never what the checks compare (content, kind, vector,
    visibility), and the compare-and-set reads the rows it folds at their latest version. A row whose
    content an earlier row of the batch folded into a stored row is checked itself (nothing of that content
    is stored) and folds again, as it would after that write.

    A near duplicate whose stored row is gone by the time it folds (deleted, pruned between the checks and
    the fold, or just after it) is checked and written again, as if it came after that delete: written as
    new, or folded into the row that is there now. ``rounds`` bounds how many times (each needs another
    delete of its row in that window); past it the writer hears :class:`MemoryNotFound`.
    """
    out: list[RememberResult | BaseException | None] = [None] * len(items)
    failed = _embed_missing(store, [row for row, _ in items])
    if failed:
        for i, exc in failed.items():
            out[i] = exc
        rest = [i for i in range(len(items)) if i not in failed]
        for i, outcome in zip(rest, remember_batch(store, [items[i] for i in rest]) if rest else [], strict=True):
            out[i] = outcome
        return out  # type: ignore[return-value]
    versions, stored, neighbours = _first_reads(store, [row for row, _ in items])
    pending = _Pending(store, near_cosine(store), versions)
    first: dict[str, int] = {}
    same_as: dict[int, int] = {}
    # The decisions on the neighbours read, for every row to check in one call (dropped with the neighbours
    # after a commit of the batch).
    checked = {i: n for i, n in neighbours.items() if items[i][0]["content_hash"] not in stored}
    decisions = dict(zip(checked, decide_many(store, [(items[i][0], n) for i, n in checked.items()]), strict=True))
    folded: dict[str, int] = {}  # content hash -> the last row of the batch with it that collapsed
    for i, (row, actor) in enumerate(items):
        digest = row["content_hash"]
        if digest in stored:
            out[i] = RememberResult(stored[digest], "exact_duplicate")
            continue
        if digest in first:
            same_as[i] = first[digest]
            continue
        first[digest] = i
        j = folded.get(digest)
        if i not in neighbours and j in neighbours and items[j][0]["vector"] == row["vector"]:
            neighbours[i] = neighbours[j]  # read for this vector, and a collapse moves nothing the checks read
        try:
            if pending.near(row):
                pending.flush(out)
                neighbours.clear()
                decisions.clear()
            decided = _check(store, row, neighbours=neighbours.get(i), decided=decisions.get(i))
        except Exception as exc:
            out[i] = exc
            continue
        if isinstance(decided, RememberResult):
            out[i] = decided
        elif decided[0] is not None:
            # Nothing of this content is stored: a later row with it is checked (and folds) in its turn.
            del first[digest]
            folded[digest] = i
            pending.collapse(i, decided[0], row, actor)
        else:
            pending.add(i, row, actor, decided[1])
    pending.flush(out)
    again = [i for i, o in enumerate(out) if isinstance(o, _FoldTargetGone)]
    if again and rounds > 0:
        redone = remember_batch(store, [items[i] for i in again], rounds=rounds - 1)
        for i, outcome in zip(again, redone, strict=True):
            out[i] = outcome
    for i, j in same_as.items():
        told = out[j]
        if isinstance(told, RememberResult) and told.outcome == "created":
            told = RememberResult(told.memory, "exact_duplicate")
        out[i] = told
    assert all(o is not None for o in out)
    return out  # type: ignore[return-value]


def _embed_missing(store: Engine, rows: Sequence[Memory]) -> dict[int, BaseException]:
    """Give each row without a vector the embedding of its content, in one call for the batch. Should that
    call fail, each such row is embedded alone, so that a text the embedder refuses fails its own write only;
    returns those failures by index in ``rows``."""
    missing = [i for i, r in enumerate(rows) if r.get("vector") is None]
    if not missing:
        return {}
    try:
        vectors = store.embed([rows[i]["content"] for i in missing]).tolist()
    except Exception:
        failed: dict[int, BaseException] = {}
        for i in missing:
            try:
                rows[i]["vector"] = store.embed([rows[i]["content"]])[0].tolist()
            except Exception as exc:
                failed[i] = exc
        return failed
    for i, vector in zip(missing, vectors, strict=True):
        rows[i]["vector"] = vector
    return {}


def _first_reads(
    store: Engine, rows: Sequence[Memory]
) -> tuple[dict[int, int], dict[str, Memory], dict[int, list[Memory]]]:
    """What a batch's checks start from: the version of each shard's table the batch writes to, read first
    (see :func:`insert_new`); then the stored row of each content hash the store already has and the
    neighbours of the first row of each content hash (by index in ``rows``; of a row whose content is stored
    they go unused). Both come from the write cache's views at that version (:mod:`.write_cache`), or, for
    the agents it does not keep, from the table in one trip (:mod:`.one_trip`: the lookup through the BTree
    index on ``content_hash`` and one multi-vector search per agent, at once). The neighbours are read
    before any commit of the batch: after one (a flush) the rows after it read theirs again."""
    first: dict[str, int] = {}
    for i, row in enumerate(rows):
        first.setdefault(row["content_hash"], i)
    versions, views = _views(store, rows)
    hits: list[Memory] = []
    kept: dict[str, Memory] = {}  # the stored rows the views keep whole
    for digest, i in first.items():
        view = views.get(rows[i]["agent_id"])
        if view is not None:
            ids = view.ids_with_hash(digest)
            whole = view.whole(ids[0]) if len(ids) == 1 else None  # two: a race, which _stored_of settles
            if whole is not None:
                kept[digest] = whole
            else:
                hits += [{"id": memory_id, "content_hash": digest} for memory_id in ids]
    near = _nearest_in_views(views, [(i, rows[i]) for i in first.values()])
    rest = [r for r in rows if r["agent_id"] not in views]
    if rest:
        searched = [(i, rows[i]) for i in first.values() if rows[i]["agent_id"] not in views]
        more_hits, more_near = one_trip.run(
            one_trip.together(_hash_hits(store, rest), _neighbours(store, searched, CHECKED))
        )
        hits += more_hits
        near.update(more_near)
    return versions, _stored_of(store, rows, hits) | kept, near


def _views(store: Engine, rows: Sequence[Memory]) -> tuple[dict[int, int], dict[str, AgentView]]:
    """The latest version of each shard's table ``rows`` go to (one trip), and the write cache's view at
    that version of each of their agents it keeps."""
    groups = store._group(rows)
    versions = {k: store.shards[k].appends.latest() for k in groups}
    views: dict[str, AgentView] = {}
    for k, group in groups.items():
        views.update(store.write_cache.views(store, k, versions[k], [r["agent_id"] for r in group]))
    return versions, views


def _nearest_in_views(views: Mapping[str, AgentView], rows: Sequence[tuple[int, Memory]]) -> dict[int, list[Memory]]:
    """The visible neighbours of each ``(index, row)`` whose agent has a view (one product per agent)."""
    by_agent: dict[str, list[tuple[int, Memory]]] = {}
    for i, row in rows:
        if row["agent_id"] in views:
            by_agent.setdefault(row["agent_id"], []).append((i, row))
    out: dict[int, list[Memory]] = {}
    for agent_id, group in by_agent.items():
        found = views[agent_id].nearest([r["vector"] for _, r in group], NEIGHBOURS)
        out.update((i, hits) for (i, _), hits in zip(group, found, strict=True))
    return out


def _current_neighbours(store: Engine, row: Memory) -> list[Memory]:
    """The visible neighbours of ``row`` in the table as it is now (the write cache's view, else a search)."""
    _, views = _views(store, [row])
    if row["agent_id"] in views:
        return _nearest_in_views(views, [(0, row)])[0]
    return visible_neighbours(store, row["agent_id"], row["vector"])


def stored_by_hash(store: Engine, rows: Sequence[Memory]) -> dict[str, Memory]:
    """The stored row of each content hash of ``rows`` that the store already has.

    One read of two columns through the BTree index on ``content_hash``, then the full rows of the hits only
    (the vectors make a full row costly to read). A content hash covers the agent id,
    so a match is the same agent's. Two rows share a hash only in the instant between racing inserts and the
    loser's clean-up: the one that stays is named.
    """
    return _stored_of(store, rows, one_trip.run(_hash_hits(store, rows)))


async def _hash_hits(store: Engine, rows: Sequence[Memory]) -> list[Memory]:
    """``id`` and ``content_hash`` of the stored rows sharing a content hash with ``rows`` (reads at once)."""
    reads = []
    for k, group in store._group(rows).items():
        hashes = list(dict.fromkeys(r["content_hash"] for r in group))
        for where in where_in("content_hash", hashes):
            reads.append(one_trip.rows(store.shards[k].memories, where, columns=["id", "content_hash"]))
    return [hit for table in await one_trip.together(*reads) for hit in table.to_pylist()]


def _stored_of(store: Engine, rows: Sequence[Memory], hits: Sequence[Memory]) -> dict[str, Memory]:
    """The stored row of each content hash ``hits`` found for ``rows``: their whole rows, read in one trip
    (:func:`_whole_rows`)."""
    if not hits:
        return {}
    shard = {r["content_hash"]: store.shard_of(r["agent_id"]) for r in rows}
    ids: dict[int, list[str]] = {}
    for h in hits:
        ids.setdefault(shard[h["content_hash"]], []).append(h["id"])
    found: dict[str, list[Memory]] = {}
    for r in _whole_rows(store, ids):
        found.setdefault(r["content_hash"], []).append(r)
    return {digest: store._first_committed(group) for digest, group in found.items()}


def insert_new(store: Engine, rows: Sequence[Memory], *, checked_at: Mapping[int, int]) -> list[str]:
    """Append rows found new by an exact check that read version ``checked_at[k]`` (or later) of each shard
    ``k``'s table, in one commit per shard; returns the ids that stay (:func:`append_new`)."""
    kept = append_new(store, rows, checked_at=checked_at, whole=False)
    return [r["id"] for r in rows if r["id"] in kept]


def append_new(
    store: Engine, rows: Sequence[Memory], *, checked_at: Mapping[int, int], whole: bool = True
) -> dict[str, Memory | None]:
    """Append rows found new by an exact check that read version ``checked_at[k]`` (or later) of each shard
    ``k``'s table, in one commit per shard; returns the rows that stay, by id, each as a read of the table
    returns it (with ``whole``; else None).

    An append, not the ``merge_insert`` on ``content_hash`` of :meth:`ShardedEngine.insert_rows` (a join
    against the whole table, twice the time). A racing writer's row of the same content is caught after the
    fact, as ``insert_rows`` must anyway (lancedb does not detect racing inserts of one key): the row
    committed first stays, a later one is deleted, audited. When the append's commit is ``checked_at + 1``
    no commit came between the check and it, so no such row can exist and that second read is skipped.
    The rows as stored come from the Arrow table appended (the types a read returns), not from a read.
    """
    kept: dict[str, Memory | None] = {}
    for k, group in store._group(rows).items():
        table = rows_to_table(group, store.memory_schema)
        appends = store.shards[k].appends
        committed = with_retry(lambda: appends.append(table))  # noqa: B023 (called at once)
        stored: list[Memory | None] = table.to_pylist() if whole else [None] * len(group)
        if k in checked_at and appends.unchanged(checked_at[k], committed - 1):
            # nothing but commits that change no row (the store's own compactions) came since the check
            store.write_cache.appended(k, checked_at[k], committed, group, whole=stored)
            kept.update((r["id"], s) for r, s in zip(group, stored, strict=True))
        else:
            stays = set(store._drop_lost_races(group))
            kept.update((r["id"], s) for r, s in zip(group, stored, strict=True) if r["id"] in stays)
    return kept


def _neighbours_of(store: Engine, rows: Sequence[tuple[int, Memory]]) -> dict[int, list[Memory]]:
    """The visible neighbours of each ``(index, row)``, one query per agent (the queries run at once)."""
    return one_trip.run(_neighbours(store, rows))


async def _neighbours(
    store: Engine, rows: Sequence[tuple[int, Memory]], columns: Sequence[str] | None = None
) -> dict[int, list[Memory]]:
    by_agent: dict[str, list[tuple[int, Memory]]] = {}
    for i, row in rows:
        by_agent.setdefault(row["agent_id"], []).append((i, row))
    searches = [
        _many_visible_neighbours(store, agent_id, [r["vector"] for _, r in group], columns=columns)
        for agent_id, group in by_agent.items()
    ]
    out: dict[int, list[Memory]] = {}
    for group, found in zip(by_agent.values(), await one_trip.together(*searches), strict=True):
        out.update((i, hits) for (i, _), hits in zip(group, found, strict=True))
    return out


def _check(
    store: Engine,
    row: Memory,
    *,
    neighbours: list[Memory] | None = None,
    decided: tuple[Memory | None, Found] | None = None,
) -> RememberResult | tuple[Memory | None, Found]:
    """The checks of one new row against the store (its ``neighbours`` and the decision on them if already
    made): the result when a racing writer stored its content since the exact check, else the decision (the
    stored row it is a near duplicate of, or the contradictions to record once it is inserted)."""
    if neighbours is None:
        neighbours, decided = _current_neighbours(store, row), None
    if any(n["content_hash"] == row["content_hash"] for n in neighbours):
        # The same content, committed by a racing writer since the exact check: the row that stays, untouched.
        existing = store._by_hash(row["agent_id"], row["content_hash"])
        if existing is not None:
            return RememberResult(existing, "exact_duplicate")
    return _judge(store, row, neighbours) if decided is None else decided


def _judge(store: Engine, row: Memory, neighbours: Sequence[Memory]) -> tuple[Memory | None, Found]:
    """Of ``neighbours`` (with ``_similarity``), the first the judge calls the same fact as ``row``; failing
    that, those the contradiction rules find ``row`` contradicts (:func:`.write_checks.decide_many`)."""
    return decide_many(store, [(row, neighbours)])[0]


_Merge = tuple[int, Memory, Memory, str]
"""A near duplicate waiting to collapse: its index in the batch, the stored row (as its check read it), the new
row and its actor."""


@dataclasses.dataclass
class _Pending:
    """The rows of a batch checked and waiting for their commit: rows to insert (with the contradictions to
    record) and near duplicates to fold into a stored row."""

    store: Engine
    near_cosine: float
    checked_at: dict[int, int]  # per shard, the table version the batch's exact check read (or a later one)
    entries: list[tuple[int, Memory, str, Found]] = dataclasses.field(default_factory=list)
    merges: list[_Merge] = dataclasses.field(default_factory=list)

    def add(self, index: int, row: Memory, actor: str, found: Found) -> None:
        self.entries.append((index, row, actor, found))

    def collapse(self, index: int, into: Memory, row: Memory, actor: str) -> None:
        self.merges.append((index, into, row, actor))

    def near(self, row: Memory) -> bool:
        """Whether the judge or the contradiction rules would act on ``row`` and a pending row of its agent
        (then ``row`` must be checked against the store once the pending rows are in it)."""
        mine = [r for _, r, _, _ in self.entries if r["agent_id"] == row["agent_id"]]
        if not mine:
            return False
        others = np.asarray([r["vector"] for r in mine], dtype=np.float32)
        vec = np.asarray(row["vector"], dtype=np.float32)
        cos = others @ vec / (np.linalg.norm(others, axis=1) * np.linalg.norm(vec) + 1e-12)
        order = [int(j) for j in np.argsort(-cos)[:NEIGHBOURS] if cos[j] >= self.near_cosine]
        same, found = _judge(self.store, row, [{**mine[j], "_similarity": float(cos[j])} for j in order])
        return same is not None or bool(found)

    def flush(self, out: list[RememberResult | BaseException | None]) -> None:
        """Insert the pending rows in one commit, fold the pending near duplicates in one compare-and-set,
        then record the inserted rows' contradictions; results go to ``out``.

        The collapses go before the contradictions, as when each collapse committed at its row's check: a
        contradiction's compare-and-set then reads a collapsed row as folded (and a collapse does not miss on
        a row marked since its check)."""
        entries, self.entries = self.entries, []
        merges, self.merges = self.merges, []
        store = self.store
        inserted: dict[str, Memory | None] | None = None
        if entries:
            try:
                inserted = append_new(store, [row for _, row, _, _ in entries], checked_at=self.checked_at)
            except Exception as exc:  # nothing of the batch was acknowledged: every writer in it hears why
                for index, *_ in entries:
                    out[index] = exc
        if merges:
            _collapse(store, merges, out)
            # a collapse moves its rows to a fragment of their own: a run of collapses alone starts compactions too
            after_commit(store, {store.shard_of(row["agent_id"]) for _, _, row, _ in merges})
        if inserted is None:
            return
        # Without contradictions the stored row is exactly the one written (as append_new converted it), not read.
        for index, row, actor, found in entries:
            try:
                if row["id"] not in inserted:  # a concurrent writer stored the same content first
                    existing = store._by_hash(row["agent_id"], row["content_hash"])
                    assert existing is not None
                    out[index] = RememberResult(existing, "exact_duplicate")
                    continue
                contradictions = tuple(apply_contradictions(store, [(row, n, hit) for n, hit in found], actor=actor))
                stored = store.get(row["id"], track_access=False) if contradictions else inserted[row["id"]]
                assert stored is not None
                out[index] = RememberResult(stored, "created", None, contradictions)
            except Exception as exc:
                out[index] = exc
        after_commit(store, {store.shard_of(row["agent_id"]) for _, row, _, _ in entries})


def _collapse(store: Engine, merges: Sequence[_Merge], out: list[RememberResult | BaseException | None]) -> None:
    """Fold each near-duplicate write of ``merges`` into its stored row, in order, in one compare-and-set
    (:func:`collapse_many`), then tell each writer its row as read after it.

    The stored rows are read whole first (a neighbour holds the :data:`CHECKED` columns only), at their
    latest version: a row moved since the checks is folded into as the compare-and-set's retry would have
    (it re-reads and folds again). A writer whose row is gone gets :class:`_FoldTargetGone` (its write is
    checked again: :func:`remember_batch`); an error of a
    read or of a compare-and-set reaches the writers it holds, and only them. The writers of several writes
    into one row are all told the row with every fold of the batch (as a read after one's own collapse can
    be under concurrent writers)."""
    try:
        whole = rows_by_id(store, [into for _, into, _, _ in merges])
    except Exception as exc:
        _tell(out, merges, exc)
        return
    done: list[_Merge] = []
    for merge in merges:
        index, into, _, _ = merge
        if into["id"] in whole:
            done.append(merge)
        else:
            out[index] = _FoldTargetGone(into["id"])
    if not done:
        return
    try:
        # One compare-and-set whatever the writers' actors: a collapse is not audited, and cas_write records
        # the actor only in an audit event.
        failed = collapse_many(
            store, [(whole[into["id"]], row, _score(into)) for _, into, row, _ in done], actor=done[0][3]
        )
    except Exception as exc:
        _tell(out, done, exc)
        return
    for index, into, _, _ in done:
        if into["id"] in failed:
            lost = failed[into["id"]]
            out[index] = _FoldTargetGone(into["id"]) if isinstance(lost, MemoryNotFound) else lost
    done = [m for m in done if m[1]["id"] not in failed]
    if not done:
        return
    try:
        read = rows_by_id(store, [into for _, into, _, _ in done], as_get=True)
    except Exception as exc:
        _tell(out, done, exc)
        return
    for index, into, _, _ in done:
        found = read.get(into["id"])
        out[index] = (
            _FoldTargetGone(into["id"]) if found is None else RememberResult(found, "semantic_duplicate", _score(into))
        )


class _FoldTargetGone(MemoryNotFound):
    """The row a near-duplicate write was to fold into is gone: the write is checked again."""


def _tell(out: list[RememberResult | BaseException | None], merges: Sequence[_Merge], exc: BaseException) -> None:
    for index, *_ in merges:
        out[index] = exc


def _score(neighbour: Memory) -> float:
    return float(neighbour["_similarity"])


def rows_by_id(store: Engine, rows: Sequence[Memory], *, as_get: bool = False) -> dict[str, Memory]:
    """The whole stored rows of the ids of ``rows`` (each with ``agent_id``), by id: one read per shard, in
    one trip; ``as_get`` counts the reads logged but not yet folded, as :meth:`ShardedEngine.get` does."""
    ids = {k: list(dict.fromkeys(r["id"] for r in group)) for k, group in store._group(rows).items()}
    return {r["id"]: r for r in _whole_rows(store, ids, as_get=as_get)}


def _whole_rows(store: Engine, ids: Mapping[int, Sequence[str]], *, as_get: bool = False) -> list[Memory]:
    """The whole rows of ``ids`` (by shard), every shard's read in one trip through lancedb's event loop
    (``get_many`` looks the ids up shard after shard, not knowing where they are; the synchronous query it
    used to run was several trips, each a hand-off between threads that the writers waiting on a batch make
    slower); ``as_get`` counts the reads logged but not yet folded, as
    :meth:`ShardedEngine.get` does."""
    chunks = [(k, where) for k, group in ids.items() for where in where_in("id", group)]
    if not chunks:
        return []
    reads = [one_trip.rows(store.shards[k].memories, where) for k, where in chunks]
    out: list[Memory] = []
    for (k, chunk), table in zip(chunks, one_trip.run(one_trip.together(*reads)), strict=True):
        if as_get:
            table = overlay_pending(table, store.shards[k].access_log.pending(ids=chunk))
        out += table.to_pylist()
    return out


def collapse_many(
    store: Engine, merges: Sequence[tuple[Memory, Memory, float]], *, actor: str
) -> dict[str, StoreError]:
    """Fold each ``(existing, incoming, score)`` near-duplicate write into its existing row, in one
    compare-and-set batch; several writes into one row are folded in order, as that many collapses one after
    another would leave it. A row edited meanwhile is read again and folded into as it now is, for up to
    :data:`COLLAPSE_ROUNDS` rounds (each a compare-and-set and its retry). Returns, by row id, what the
    writers of each row it could not fold into are told: :class:`MemoryNotFound` for a row deleted meanwhile,
    :class:`VersionConflict` for one still being edited."""
    into: dict[str, list[tuple[Memory, float]]] = {}
    rows: dict[str, Memory] = {}
    for existing, incoming, score in merges:
        into.setdefault(existing["id"], []).append((incoming, score))
        rows.setdefault(existing["id"], existing)
    half_life = store.settings.importance_half_life_days

    def change(row: Memory) -> dict[str, Any]:
        now = utcnow()
        folded = dict(row)
        for incoming, score in into[row["id"]]:
            # scored on the row as the collapse read it (the previous fold), as one collapse at a time would
            importance, factors = importance_of(folded, now=now, half_life_days=half_life)
            meta = loads_metadata(folded)
            match = {"match_id": incoming["id"], "content": incoming["content"], "score": round(score, 6)}
            meta.setdefault("duplicate_matches", []).append({**match, "at": now.isoformat()})
            folded["metadata"] = dumps_metadata(meta)
            folded["reinforcement_count"] = int(folded["reinforcement_count"] or 0) + 1
            folded["confidence"] = reinforce(confidence_of(folded))
            folded["tags"] = sorted(set(folded["tags"] or []) | set(incoming["tags"] or []))
            folded["importance"], folded["importance_factors"] = importance, factors
        return {k: folded[k] for k in _COLLAPSED} | {"version": row["version"]}

    pending, missed = list(rows.values()), list(rows)
    for _ in range(COLLAPSE_ROUNDS):
        result = store.cas_write(
            [change(r) for r in pending],
            recompute=lambda fresh: [change(r) for r in fresh],
            actor=actor,
            action="dedup",
        )
        missed = list(result.skipped_concurrent_edit)
        pending = store.get_many(missed) if missed else []
        if not pending:
            break
    current = {r["id"]: int(r["version"]) for r in pending}
    return {
        i: VersionConflict(i, expected=int(rows[i]["version"]), current=current[i])
        if i in current
        else MemoryNotFound(i)
        for i in missed
    }


COLLAPSE_ROUNDS = 4  # rounds a collapse gives the concurrent edits of its row before its writers hear a conflict
# The columns a collapse changes (with ``id`` and the ``version`` it was decided on).
_COLLAPSED = ("id", "metadata", "importance", "importance_factors", "reinforcement_count", "confidence", "tags")
