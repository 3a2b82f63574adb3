"""Retention: the one rule for what may leave recall, and why.

A lifecycle engine exists to make memory better; age and neglect alone must not erase it. Two policies
(``ENGRAM_RETENTION_POLICY``):

``safe`` (the default)
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

Both policies keep the score, age and pin conditions; ``safe`` adds "held elsewhere". The passes ask this
module, never restate it: :func:`holders` reads one agent's links and rows once and answers both questions.

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> row = store.remember("alice", "User lives in Berlin").memory
>>> h = holders(store, "alice")
>>> h.may_prune(row["id"]), h.may_archive(row["id"])
(False, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from engram_pipeline.settings import RETENTION_POLICIES
from engram_pipeline.visibility import is_visible

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

SAFE, SEED = RETENTION_POLICIES


@dataclass(frozen=True)
class Holders:
    """Who holds what one agent's rows say, as of one read. ``merged[id]`` and ``absorbed[id]`` name the
    rows holding ``id``; ``policy`` decides what the passes may do with them."""

    policy: str
    merged: dict[str, frozenset[str]] = field(default_factory=dict)
    absorbed: dict[str, frozenset[str]] = field(default_factory=dict)

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

    ``policy`` defaults to the store's ``ENGRAM_RETENTION_POLICY``. Under ``seed`` nothing is read.
    """
    policy = policy or store.settings.retention_policy
    if policy == SEED:
        return Holders(SEED)
    columns = ["id", "status", "superseded_by", "source"]
    if isinstance(agent_id, str):
        rows = store.scan(agent_id, columns=columns).to_pylist()
    else:
        rows = store.scan_agents(agent_id, columns=columns).to_pylist()
    present = {r["id"] for r in rows}
    derived = {r["id"] for r in rows if r["source"] == "derived"}
    visible = {r["id"] for r in rows if is_visible(r)}
    merged: dict[str, set[str]] = {}
    absorbed: dict[str, set[str]] = {}
    for r in rows:
        if r["superseded_by"] is not None and r["superseded_by"] in present and r["superseded_by"] != r["id"]:
            merged.setdefault(r["id"], set()).add(r["superseded_by"])
    links = store.links_for_agent(agent_id)
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
    return Holders(
        policy,
        {k: frozenset(v) for k, v in merged.items()},
        {k: frozenset(v) for k, v in absorbed.items()},
    )
