"""What the consolidation stages share: their one read, and the writer of what they derived.

A stage (beliefs, procedures, schemas) decides per agent, from rows already read, a :class:`DerivedPlan`: new
derived rows to insert (with their ``derived-from`` sources), changes to existing rows (compare-and-set at the
versions read, with how to decide a missed row again), and links that follow from the changes that applied.
:func:`write_derived` writes the plans of any number of agents together: one insert (one commit per shard),
one compare-and-set, one ``add_links``, whatever the number of agents. A stage run for one agent is the same
call with one plan, so one agent's consolidation and a sweep over many write the same rows.

:func:`visible_rows` is the stages' read: every visible row of a set of agents (vectors aside), in one query
per shard and 1,000 agents, grouped by agent and kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram_pipeline.model import Memory, content_hash
from engram_pipeline.store.sql import where_in
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore
    from engram_pipeline.store.links import Link
    from engram_pipeline.store.results import Change

Rows = dict[str, list[Memory]]  # kind -> an agent's visible rows of that kind, in table order


@dataclass
class DerivedPlan:
    """What a stage decided for one agent; see the module docstring.

    ``specs``: new rows (``content``, ``confidence``, ``metadata``, ``sources`` = [(id, score)]).
    ``changes``: compare-and-set changes; ``redo`` decides a missed row again from its fresh copy (None: no
    change any more). ``links(applied)``: the links that the applied changes bring. ``embed_changes``: the
    changes rewrite ``content`` and need its vector. ``gone``: rows the stage had to leave out because they
    left recall while it ran (counted as skipped). ``none_qualified``: why the agent has no row of this kind
    and gets none from this run, or "" (a stage that derives nothing says so).
    """

    agent_id: str
    kind: str
    specs: list[dict[str, Any]] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    redo: Callable[[Memory], Change | None] = lambda row: None
    links: Callable[[set[str]], list[Link]] = lambda applied: []
    embed_changes: bool = False
    relinks: list[Link] = field(default_factory=list)
    gone: tuple[str, ...] = ()
    none_qualified: str = ""


@dataclass(frozen=True)
class DerivedWrite:
    """One agent's share of :func:`write_derived`: the ids inserted, changed, and skipped as edited meanwhile
    (or gone from recall while the stage ran)."""

    created: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


def visible_rows(store: MemoryStore, agent_ids: Sequence[str]) -> dict[str, Rows]:
    """Every visible row of ``agent_ids`` without its vector (one read), by agent, then by kind."""
    columns = [name for name in store.engine.memory_schema.names if name != "vector"]
    out: dict[str, Rows] = {agent: {} for agent in agent_ids}
    for row in store.engine.scan_agents(agent_ids, columns=columns, where=VISIBLE_SQL).to_pylist():
        out.setdefault(row["agent_id"], {}).setdefault(row["kind"], []).append(row)
    return out


def write_derived(
    store: MemoryStore,
    plans: Sequence[DerivedPlan],
    *,
    actor: str,
    action: str,
    run_id: str | None,
    now: datetime | None = None,
) -> dict[str, DerivedWrite]:
    """Insert, change and link what ``plans`` (one per agent) decided, for all of them at once. New rows are
    created at ``now``, the run's time (default: the clock): a belief a run at a simulated time distils is as
    old as that run, not as the wall clock, or recall's recency would rank it as new at every later time."""
    specs = _free_contents(store, [(p.agent_id, p.kind, sp) for p in plans for sp in p.specs])
    rows, links = [], []
    vectors = list(store.engine.embed([sp["content"] for _, _, sp in specs])) if specs else []
    for (agent, kind, sp), vec in zip(specs, vectors, strict=True):
        row = store.engine.new_row(
            agent,
            sp["content"],
            tier="ltm",
            kind=kind,
            source="derived",
            confidence=round(float(sp["confidence"]), 6),
            metadata=sp["metadata"],
            created_at=now,
        )
        row["vector"] = vec.tolist()
        rows.append((row, sp))
    inserted = set(store.engine.insert_rows([row for row, _ in rows]))
    for row, sp in rows:
        if row["id"] in inserted:
            links += [
                {"agent_id": row["agent_id"], "src_id": row["id"], "dst_id": src, "rel": "derived-from",
                 "score": float(score)}
                for src, score in sp["sources"]
            ]  # fmt: skip
    to_embed = [c for p in plans if p.embed_changes for c in p.changes]
    if to_embed:
        for change, vec in zip(to_embed, store.engine.embed([c["content"] for c in to_embed]), strict=True):
            change["vector"] = vec.tolist()
    plan_of = {c["id"]: p for p in plans for c in p.changes}

    def redo(fresh: list[Memory]) -> list[Change]:
        again = (plan_of[r["id"]].redo(r) for r in fresh)
        return [c for c in again if c]

    changes = [c for p in plans for c in p.changes]
    result = store.engine.cas_write(changes, recompute=redo, actor=actor, action=action, run_id=run_id)
    applied, skipped = set(result.applied), set(result.skipped_concurrent_edit)
    out = {}
    for p in plans:
        mine = {c["id"] for c in p.changes}
        links += p.links(applied & mine)
        created = tuple(r["id"] for r, _ in rows if r["agent_id"] == p.agent_id and r["id"] in inserted)
        out[p.agent_id] = DerivedWrite(
            created, tuple(i for i in result.applied if i in mine), (*(i for i in skipped if i in mine), *p.gone)
        )
    store.engine.add_links(links + _missing([link for p in plans for link in p.relinks], store), run_id=run_id)
    return out


def _missing(links: list[Link], store: MemoryStore) -> list[Link]:
    """Of ``links``, those not stored yet (one read), each once."""
    if not links:
        return []
    have = {(x["src_id"], x["dst_id"], x["rel"]) for x in store.engine.links_of({x["src_id"] for x in links})}
    out = []
    for link in links:
        key = (link["src_id"], link["dst_id"], link["rel"])
        if key not in have:
            have.add(key)
            out.append(link)
    return out


def _free_contents(
    store: MemoryStore, specs: Sequence[tuple[str, str, dict[str, Any]]]
) -> list[tuple[str, str, dict[str, Any]]]:
    """Content is unique per agent (exact dedup): a derived sentence that a row already says verbatim is
    written as ``<sentence> (consolidated).`` instead, so the derived row can exist beside its source. One
    read for every agent's specs (a spec repeating another's content within its agent keeps the first's
    place, the later one's fields)."""
    by_hash: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for agent, kind, sp in specs:
        by_hash[content_hash(agent, sp["content"])] = (agent, kind, sp)
    if not by_hash:
        return []
    agents = sorted({agent for agent, _, _ in specs})
    hashes = list(by_hash)
    clash: set[str] = set()
    for where in where_in("content_hash", hashes):
        clash.update(
            store.engine.scan_agents(agents, columns=["content_hash"], where=where)["content_hash"].to_pylist()
        )
    return [
        (agent, kind, {**sp, "content": f"{sp['content'].rstrip('.')} (consolidated)."} if h in clash else sp)
        for h, (agent, kind, sp) in by_hash.items()
    ]
