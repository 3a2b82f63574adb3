"""Retention: the one rule for what may leave recall, and why.

A lifecycle engine exists to make memory better; age and neglect alone must not erase a fact, and what says
nothing should not stay forever. Three policies (``ENGRAM_RETENTION_POLICY``):

``signal`` (the default)
    What ``safe`` lets go, plus **noise**: a row whose information score (:mod:`engram_pipeline.information`,
    stored in ``importance_factors``) is below ``ENGRAM_NOISE_THRESHOLD`` (0.3), that is visible, not pinned,
    not derived, never recalled (no access, counting the reads not folded yet), older than
    ``ENGRAM_NOISE_ARCHIVE_AFTER_DAYS`` (30) and that nobody restored, is *archived* by the archival pass
    (audited, restorable, returned with ``include_archived``). A fact (score at or above the threshold), or a
    row not scored yet, never leaves recall by age alone. A restored row is kept: restoring is a person saying
    it matters.

``safe``
    A memory leaves recall only when what it says is held elsewhere:

    - **merged**: it is hidden behind a row that still exists: a merge canonical (``superseded_by``, a
      ``duplicate-of`` link to it) or a newer value that superseded it (a ``supersedes`` link). Decay may
      *prune* such a row once its score fades (audited, restorable); nothing else is ever pruned for age.
    - **absorbed**: a visible derived belief, procedure or schema links to it (``derived-from``) and it is not
      itself derived (a belief a schema summarises stays, so evidence is one hop from a hit). Archival
      and confidence decay may *archive* such a row once its confidence falls below the archive floor; it
      stays in the table and recall returns it as the evidence of the derived hit (see
      :func:`engram_pipeline.store.recall.recall`, ``evidence``).

    Everything else only loses rank and tier as it ages: importance decays (``stale`` rows stay recalled),
    confidence decays (tiers and ``min_confidence`` filters see it), but the row stays visible. STM rows with
    an explicit TTL still expire (that is a policy the writer chose).

``seed``
    The thresholds of the memory server this project descends from, for operators who want its pruning:
    decay prunes any unpinned row scoring below ``MEMORY_DECAY_PRUNE_SCORE_THRESHOLD`` (0.15) and older than
    ``MEMORY_DECAY_PRUNE_OLDER_THAN_DAYS`` (30), and archival archives any unpinned visible row whose
    confidence is below ``ENGRAM_ARCHIVE_CONFIDENCE`` (0.40). With no accesses and no cue words a memory
    scores ``0.35 * 0.5 ** (30 / 14) = 0.079`` after 30 days, so a month without recall prunes it.

Every policy keeps the score, age and pin conditions; ``safe`` adds "held elsewhere", ``signal`` adds the noise
rule. The passes ask this module, never restate it: :func:`holders` reads one agent's links and rows once and
answers what may be pruned, archived or forgotten; :func:`forgettable` lists the noise the archival pass takes
at a given time (and health reports it in advance).

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> row = store.remember("alice", "User lives in Berlin").memory
>>> h = holders(store, "alice")
>>> h.may_prune(row["id"]), h.may_archive(row["id"]), h.is_noise(row["id"])
(False, False, False)
>>> chat = store.remember("alice", "haha thanks!").memory
>>> holders(store, "alice").is_noise(chat["id"])
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from engram_pipeline.lifecycle._common import agent_frame
from engram_pipeline.settings import RETENTION_POLICIES
from engram_pipeline.store.access_log import overlay_pending
from engram_pipeline.visibility import VISIBLE_SQL, is_visible

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

SIGNAL, SAFE, SEED = RETENTION_POLICIES
# What the noise rule reads of a row (never the vector).
NOISE_COLUMNS = ["id", "agent_id", "version", "status", "superseded_by", "pinned", "source", "created_at",
                 "access_count", "last_accessed_at"]  # fmt: skip


@dataclass(frozen=True)
class Holders:
    """Who holds what one agent's rows say, as of one read. ``merged[id]`` and ``absorbed[id]`` name the
    rows holding ``id``; ``noise`` the rows the noise rule may take (under ``signal``: noise by their stored
    score, not pinned, not derived, never restored); ``policy`` decides what the passes may do with them."""

    policy: str
    merged: dict[str, frozenset[str]] = field(default_factory=dict)
    absorbed: dict[str, frozenset[str]] = field(default_factory=dict)
    noise: frozenset[str] = frozenset()

    def is_noise(self, memory_id: str) -> bool:
        """Archival may hide this row as noise (given it is visible, old enough and never recalled)."""
        return self.policy == SIGNAL and memory_id in self.noise

    def forgets(self, row: Mapping[str, Any], *, cutoff: datetime) -> bool:
        """The noise rule, on one row (with :data:`NOISE_COLUMNS`) as read now: noise, visible, unpinned,
        created before ``cutoff`` and never recalled."""
        return (
            self.is_noise(row["id"])
            and is_visible(row)
            and not row.get("pinned")
            and row["created_at"] < cutoff
            and not row.get("access_count")
            and row.get("last_accessed_at") is None
        )

    def may_prune(self, memory_id: str) -> bool:
        """Decay may delete this row (given its score, age and pin already qualify)."""
        return self.policy == SEED or memory_id in self.merged

    def may_archive(self, memory_id: str) -> bool:
        """Archival may hide this row (given its confidence and pin already qualify)."""
        return self.policy == SEED or memory_id in self.merged or memory_id in self.absorbed

    def prunable_expr(self) -> pl.Expr:
        """:meth:`may_prune` as a polars expression over an ``id`` column."""
        return pl.lit(True) if self.policy == SEED else pl.col("id").is_in(list(self.merged))

    def archivable_mask(self, ids: Sequence[str]) -> np.ndarray:
        """:meth:`may_archive` for each of ``ids``, as a boolean array."""
        return np.fromiter((self.may_archive(i) for i in ids), dtype=bool, count=len(ids))

    def prunable(self, ids: Iterable[str]) -> list[str]:
        return [i for i in ids if self.may_prune(i)]

    def archivable(self, ids: Iterable[str]) -> list[str]:
        return [i for i in ids if self.may_archive(i)]


def holders(store: MemoryStore, agent_id: str | Sequence[str], *, policy: str | None = None) -> Holders:
    """Read ``agent_id``'s rows (four columns) and links once and say which rows are held elsewhere; given a
    sequence of agent ids (a sweep), read all of theirs at once (ids are unique across agents, and what holds a
    row is always of its own agent).

    ``policy`` defaults to the store's ``ENGRAM_RETENTION_POLICY``. Under ``seed`` nothing is read; under
    ``signal`` the rows' stored information scores and the agent's restores are read too.
    """
    policy = policy or store.settings.retention_policy
    if policy == SEED:
        return Holders(SEED)
    columns = ["id", "status", "superseded_by", "source"]
    read = [*columns, "pinned", "importance_factors"] if policy == SIGNAL else columns
    if isinstance(agent_id, str):
        table = store.engine.scan(agent_id, columns=read)
    else:
        table = store.engine.scan_agents(agent_id, columns=read)
    rows = table.select(columns).to_pylist()
    present = {r["id"] for r in rows}
    derived = {r["id"] for r in rows if r["source"] == "derived"}
    visible = {r["id"] for r in rows if is_visible(r)}
    merged: dict[str, set[str]] = {}
    absorbed: dict[str, set[str]] = {}
    for r in rows:
        if r["superseded_by"] is not None and r["superseded_by"] in present and r["superseded_by"] != r["id"]:
            merged.setdefault(r["id"], set()).add(r["superseded_by"])
    links = store.engine.links_for_agent(agent_id)
    for src, dst, rel in zip(
        links["src_id"].to_pylist(), links["dst_id"].to_pylist(), links["rel"].to_pylist(), strict=True
    ):
        if src == dst:
            continue
        if rel == "duplicate-of" and dst in present:  # src is a duplicate of the canonical dst
            merged.setdefault(src, set()).add(dst)
        elif rel == "supersedes" and src in present:  # src is the newer value that replaced dst
            merged.setdefault(dst, set()).add(src)
        elif rel == "derived-from" and src in visible and dst not in derived:
            # a visible belief/procedure/schema holds what its source episode or fact said; a derived source
            # (a belief under a schema) stays, so recall's evidence is never more than one hop away
            absorbed.setdefault(dst, set()).add(src)
    noise: frozenset[str] = frozenset()
    if policy == SIGNAL:
        restored = store.engine.audit_for_agent(agent_id, actions=["restore"], columns=["memory_id"])["memory_id"]
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        info = pl.col("importance_factors").str.json_path_match("$.information").cast(pl.Float64)
        taken = frame.filter(
            (info < store.settings.noise_threshold)  # a row not scored yet (null) is not noise
            & (pl.col("source") != "derived")
            & ~pl.col("pinned").fill_null(False)
            & ~pl.col("id").is_in(restored.to_pylist())
        )
        noise = frozenset(taken["id"].to_list())
    return Holders(
        policy,
        {k: frozenset(v) for k, v in merged.items()},
        {k: frozenset(v) for k, v in absorbed.items()},
        noise,
    )


def forgettable(store: MemoryStore, agent_id: str | Sequence[str], *, now: datetime, held: Holders) -> pl.DataFrame:
    """The rows (``id``, ``agent_id``, ``version``, sorted by id) the noise rule archives at ``now``
    (:meth:`Holders.forgets`); empty unless the policy is ``signal``. Reads not folded yet count as recalls."""
    if held.policy != SIGNAL or not held.noise:
        return pl.DataFrame(schema={"id": pl.String, "agent_id": pl.String, "version": pl.Int64})
    cutoff = now - timedelta(days=store.settings.noise_archive_after_days)
    rows = agent_frame(store, agent_id, NOISE_COLUMNS, where=VISIBLE_SQL)
    rows = rows.filter(pl.col("id").is_in(list(held.noise)))
    if rows.height:
        agents = [agent_id] if isinstance(agent_id, str) else list(agent_id)
        read = pl.from_arrow(overlay_pending(rows.to_arrow(), store.engine.pending_access(agents)))
        assert isinstance(read, pl.DataFrame)
        rows = read
    keep = [held.forgets(r, cutoff=cutoff) for r in rows.iter_rows(named=True)]
    return rows.filter(pl.Series(keep, dtype=pl.Boolean)).select("id", "agent_id", "version").sort("id")
