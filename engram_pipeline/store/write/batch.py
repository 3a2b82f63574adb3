"""The write path of ``remember``: a batch of new rows checked and committed as if written one after another.

``MemoryStore.remember`` validates, then hands the row to its shard's group commit (:mod:`.commit`): the writes
of one process that arrive while a batch commits go through :func:`remember_batch` together. The batch embeds
the rows without a vector in one call, reads what its checks need in one trip (:mod:`.reads`), asks the judge
and the contradiction rules about every row at once (:mod:`.checks`), then inserts the new rows in one append
(:mod:`.insert`), folds the near duplicates into their stored rows in one compare-and-set (:mod:`.collapse`)
and records the contradictions (:mod:`engram_pipeline.store.marks`). A write that contradicts a stored row
under policy ``flag`` marks both rows, under ``supersede`` hides the older one, audited. Why each step costs
what it does: ``docs/scale.md``, "How the write path was measured".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from engram_pipeline.model import Memory
from engram_pipeline.store.marks import apply_contradictions
from engram_pipeline.store.results import RememberResult
from engram_pipeline.store.write.checks import Found, decide_many, near_cosine
from engram_pipeline.store.write.collapse import FoldTargetGone, Merge, collapse_writes
from engram_pipeline.store.write.commit import GroupCommit
from engram_pipeline.store.write.compaction import after_commit
from engram_pipeline.store.write.insert import append_new
from engram_pipeline.store.write.reads import NEIGHBOURS, current_neighbours, first_reads

if TYPE_CHECKING:
    from engram_pipeline.store.write.cache import Writer

Item = tuple[Memory, str]
"""A write handed to the group commit: the new row (with its vector) and the actor writing it."""


def new_write_group(store: Writer) -> GroupCommit[Item, RememberResult]:
    """A group commit that batches the ``remember`` calls of one process (see :mod:`.commit`). The
    store keeps one per shard: a batch commits to one table, and writers of different shards never wait for
    one another's batch."""
    return GroupCommit(lambda items: remember_batch(store, items))


def remember_batch(store: Writer, items: Sequence[Item], *, rounds: int = 3) -> list[RememberResult | BaseException]:
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
    versions, stored, neighbours = first_reads(store, [row for row, _ in items])
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
    again = [i for i, o in enumerate(out) if isinstance(o, FoldTargetGone)]
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


def _embed_missing(store: Writer, rows: Sequence[Memory]) -> dict[int, BaseException]:
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


def _check(
    store: Writer,
    row: Memory,
    *,
    neighbours: list[Memory] | None = None,
    decided: tuple[Memory | None, Found] | None = None,
) -> RememberResult | tuple[Memory | None, Found]:
    """The checks of one new row against the store (its ``neighbours`` and the decision on them if already
    made): the result when a racing writer stored its content since the exact check, else the decision (the
    stored row it is a near duplicate of, or the contradictions to record once it is inserted)."""
    if neighbours is None:
        neighbours, decided = current_neighbours(store, row), None
    if any(n["content_hash"] == row["content_hash"] for n in neighbours):
        # The same content, committed by a racing writer since the exact check: the row that stays, untouched.
        existing = store._by_hash(row["agent_id"], row["content_hash"])
        if existing is not None:
            return RememberResult(existing, "exact_duplicate")
    return _judge(store, row, neighbours) if decided is None else decided


def _judge(store: Writer, row: Memory, neighbours: Sequence[Memory]) -> tuple[Memory | None, Found]:
    """Of ``neighbours`` (with ``_similarity``), the first the judge calls the same fact as ``row``; failing
    that, those the contradiction rules find ``row`` contradicts (:func:`.checks.decide_many`)."""
    return decide_many(store, [(row, neighbours)])[0]


@dataclasses.dataclass
class _Pending:
    """The rows of a batch checked and waiting for their commit: rows to insert (with the contradictions to
    record) and near duplicates to fold into a stored row."""

    store: Writer
    near_cosine: float
    checked_at: dict[int, int]  # per shard, the table version the batch's exact check read (or a later one)
    entries: list[tuple[int, Memory, str, Found]] = dataclasses.field(default_factory=list)
    merges: list[Merge] = dataclasses.field(default_factory=list)

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
            collapse_writes(store, merges, out)
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
