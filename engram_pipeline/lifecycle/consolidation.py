"""Five-stage consolidation of one agent: episodes into beliefs, procedures and schemas; archive what faded.

1. :func:`~engram_pipeline.lifecycle.episodes.cluster_episodes`: similar episodes grouped (neighbour graph).
2. :func:`~engram_pipeline.lifecycle.beliefs.extract_beliefs`: a cluster's majority claim becomes a belief.
3. :func:`~engram_pipeline.lifecycle.procedures.detect_procedures`: successful trigger-action patterns.
4. :func:`~engram_pipeline.lifecycle.schemas.derive_schemas`: a subject's confident facts become a profile.
5. :func:`~engram_pipeline.lifecycle.archival.archive_faded`: confidence below the floor is archived.

Each stage is a function of its own (Dagster materialises one asset per stage); :func:`consolidate` runs them
in order. Every derived row has ``source="derived"`` and ``derived-from`` links to its sources; every stage
writes only when its evidence is new, so a second run on unchanged data adds and changes nothing.

Scope: ``recent`` considers episodes created since the last finished run (its ``now``, the watermark kept in
the agent's ``consolidate`` cursor row); ``full`` considers all. A killed run resumes with the same ``now`` and
the same watermark and skips the stages it finished (re-running one would be harmless anyway; a resumed stage
also adds the links of rows its killed attempt wrote before their links).

:func:`consolidation_sweep` runs the stages over a set of agents of one shard at once: one read of their
visible rows for the stages (read again only after a stage changed them), each agent decided on its own, and
each stage written once for all of them (one insert, one compare-and-set, one ``add_links``; archival is
:func:`~engram_pipeline.lifecycle.archival.archival_sweep`), with one cursor and lease per shard
(:func:`~engram_pipeline.lifecycle._common.sweep_key`). Each agent's watermark still lives in its own cursor
row (the sweep writes them in one commit before it finishes), so a run for one agent and a sweep that includes
it can take turns without losing or redoing an episode. :func:`consolidate` is the sweep of one agent.
No stage needs a language model; ``extractor`` is the hook for one (see
:mod:`engram_pipeline.lifecycle.extractors`).

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> for n, text in enumerate(["User lives in Berlin", "User ran the deploy script and it failed"]):
...     _ = store.remember("a", text, kind="episodic", memory_id=f"e{n}")
>>> consolidate(store, "a", scope="full").episodes_scanned
2
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engram_pipeline.lifecycle._common import PassCursor, sweep_key
from engram_pipeline.lifecycle._derived import DerivedWrite, Rows, visible_rows, write_derived
from engram_pipeline.lifecycle.archival import ArchivalReport, archival_sweep, archive_faded
from engram_pipeline.lifecycle.beliefs import ACTOR, BeliefReport, extract_beliefs, plan_beliefs
from engram_pipeline.lifecycle.episodes import (
    CONSOLIDATE_PASS,
    SCOPES,
    EpisodeClusters,
    cluster_episodes,
    episode_clusters,
    last_watermarks,
)
from engram_pipeline.lifecycle.extractors import Extractor, default_extractor
from engram_pipeline.lifecycle.procedures import ProcedureReport, detect_procedures, plan_procedures
from engram_pipeline.lifecycle.schemas import SchemaReport, derive_schemas, plan_schemas
from engram_pipeline.store import MemoryStore

__all__ = [
    "ArchivalReport",
    "BeliefReport",
    "ConsolidationReport",
    "EpisodeClusters",
    "ProcedureReport",
    "SchemaReport",
    "archive_faded",
    "cluster_episodes",
    "consolidate",
    "consolidation_sweep",
    "derive_schemas",
    "detect_procedures",
    "extract_beliefs",
]


@dataclass(frozen=True)
class ConsolidationReport:
    episodes_scanned: int
    clusters: int
    beliefs_created: int
    beliefs_reinforced: int
    procedures_created: int
    procedures_reinforced: int
    schemas_created: int
    schemas_updated: int
    archived: int
    skipped_concurrent_edit: int
    cursor: dict[str, Any] = field(default_factory=dict)
    # stage -> why it derived nothing for an agent that has no row of its kind (procedures, schemas; a stage a
    # resumed run had finished says nothing)
    none_qualified: dict[str, str] = field(default_factory=dict)


def consolidate(
    store: MemoryStore,
    agent_id: str,
    *,
    scope: str = "recent",
    graph: Any = None,
    now: datetime | None = None,
    run_id: str | None = None,
    extractor: Extractor | None = None,
) -> ConsolidationReport:
    """Run the five stages for ``agent_id`` and record the ``recent`` watermark; see the module docstring. The
    sweep of one agent."""
    return consolidation_sweep(
        store, [agent_id], scope=scope, graph=graph, now=now, run_id=run_id, extractor=extractor
    )[agent_id]


def consolidation_sweep(
    store: MemoryStore,
    agent_ids: Sequence[str],
    *,
    scope: str = "recent",
    graph: Any = None,
    now: datetime | None = None,
    run_id: str | None = None,
    extractor: Extractor | None = None,
) -> dict[str, ConsolidationReport]:
    """:func:`consolidate` for every agent of ``agent_ids`` (all of one shard) in one run; see the module
    docstring. ``graph`` may hold the neighbour pairs of all of them."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    agents = sorted(set(agent_ids))
    if not agents:
        return {}
    extractor = extractor or default_extractor()
    key, agents_scope = sweep_key(agents, store.settings.shards)
    previous = last_watermarks(store, agents)
    cursor = PassCursor.deferred(
        store, CONSOLIDATE_PASS, key, now=now, run_id=run_id, scope=agents_scope, agents=agents
    )
    state = cursor.state
    since = _since(state, key, previous)  # a resumed run keeps where the last one stopped
    now, run = cursor.now, cursor.run_id
    done = _stages(state, key)
    why: dict[str, dict[str, str]] = {a: {} for a in agents}

    def stage(name: str, values: dict[str, tuple[int, ...]]) -> None:
        # A stage that wrote begins the run (a cursor before it would only say "nothing yet"); an idle run
        # writes no cursor at all, and the next one starts from the same watermark.
        # the cursor keeps the counts of the agents that did something
        done[name] = {a: dict(zip(STAGE_COUNTS[name], v, strict=True)) for a, v in values.items() if any(v)}
        if done[name]:
            cursor.begin()
        if not cursor.pending:
            store.engine.set_cursor(CONSOLIDATE_PASS, key, state)

    clusters = episode_clusters(store, agents, scope=scope, graph=graph, now=now, since=since)
    if any(c.episodes_scanned for c in clusters.values()):  # new episodes: the stages below are resumable work
        cursor.begin()
    rows = _Rows(store, agents)
    settings = store.settings
    relink = bool(state.get("resumed"))  # a killed attempt may have written rows and not yet their links
    if "beliefs" not in done:
        planned = {
            a: plan_beliefs(
                settings, a, rows.of(a), clusters[a], now=now, run_id=run, extractor=extractor, relink=relink
            )
            for a in agents
        }
        wrote = write_derived(
            store, [p for p, _, _ in planned.values()], actor=ACTOR, action="reinforce", run_id=run, now=now
        )
        rows.wrote(wrote)
        stage("beliefs", {a: (len(w.created), len(w.applied), len(w.skipped)) for a, w in wrote.items()})
    if "procedures" not in done:
        recent = scope == "recent"
        procs = [
            plan_procedures(
                settings, a, rows.of(a), clusters[a] if recent else None, now=now, run_id=run, relink=relink
            )[0]
            for a in agents
        ]
        for p in procs:
            why[p.agent_id] |= {"procedures": p.none_qualified} if p.none_qualified else {}
        wrote = write_derived(store, procs, actor=ACTOR, action="reinforce", run_id=run, now=now)
        stage("procedures", {a: (len(w.created), len(w.applied), len(w.skipped)) for a, w in wrote.items()})
    if "schemas" not in done:
        schemas = [
            plan_schemas(settings, a, rows.of(a), now=now, run_id=run, extractor=extractor, relink=relink)[0]
            for a in agents
        ]
        for p in schemas:
            why[p.agent_id] |= {"schemas": p.none_qualified} if p.none_qualified else {}
        wrote = write_derived(store, schemas, actor=ACTOR, action="update_schema", run_id=run, now=now)
        stage("schemas", {a: (len(w.created), len(w.applied), len(w.skipped)) for a, w in wrote.items()})
    if "archival" not in done:
        archived = archival_sweep(store, agents, now=now, run_id=run)
        stage("archival", {a: (r.archived, r.skipped_concurrent_edit) for a, r in archived.items()})
    watermark = now.isoformat()
    if len(agents) > 1 and not cursor.pending:
        # Each agent's watermark lives in its own cursor row, where its own run keeps it (one commit for all),
        # written before the sweep's cursor finishes: a kill in between resumes and writes them again.
        began = [a for a in agents if clusters[a].episodes_scanned or any(a in done[n] for n in done)]
        store.engine.set_cursors(
            CONSOLIDATE_PASS,
            {a: {"done": True, "watermark": watermark, "scope": scope, "since": since[a], "run_id": run,
                 "now": watermark, "swept_by": key} for a in began},
        )  # fmt: skip
    summary = cursor.finish(watermark=watermark, scope=scope)
    out = {}
    for a in agents:
        counts = {name: dict.fromkeys(STAGE_COUNTS[name], 0) | done[name].get(a, {}) for name in done}
        out[a] = ConsolidationReport(
            episodes_scanned=clusters[a].episodes_scanned,
            clusters=len(clusters[a].clusters),
            beliefs_created=counts["beliefs"]["created"],
            beliefs_reinforced=counts["beliefs"]["reinforced"],
            procedures_created=counts["procedures"]["created"],
            procedures_reinforced=counts["procedures"]["reinforced"],
            schemas_created=counts["schemas"]["created"],
            schemas_updated=counts["schemas"]["updated"],
            archived=counts["archival"]["archived"],
            skipped_concurrent_edit=sum(c.get("skipped", 0) for c in counts.values()),
            cursor={**summary, "since": since[a], "watermark": clusters[a].watermark},
            none_qualified=why[a],
        )
    return out


# each stage's counts, as its cursor keeps them (an agent that did nothing in a stage is left out)
STAGE_COUNTS = {
    "beliefs": ("created", "reinforced", "skipped"),
    "procedures": ("created", "reinforced", "skipped"),
    "schemas": ("created", "updated", "skipped"),
    "archival": ("archived", "skipped"),
}


def _since(state: dict[str, Any], key: str, previous: dict[str, str | None]) -> dict[str, str | None]:
    """Each agent's watermark when the run began, kept in the run's cursor: a one-agent run's ``since`` (where
    :func:`~engram_pipeline.lifecycle.episodes.last_watermark` finds an unfinished run's start), a sweep's
    ``since_by_agent``."""
    if list(previous) == [key]:
        state.setdefault("since", previous[key])
        return {key: state["since"]}
    kept = state.setdefault("since_by_agent", {a: s for a, s in previous.items() if s is not None})
    return {a: kept.get(a) for a in previous}


def _stages(state: dict[str, Any], key: str) -> dict[str, dict[str, dict[str, int]]]:
    """The finished stages' counts by agent, kept in the run's cursor (a one-agent cursor saved by an older
    release holds its counts unsplit)."""
    done: dict[str, dict[str, Any]] = state.setdefault("stages", {})
    for name, counts in done.items():
        if counts and all(isinstance(v, int) for v in counts.values()):
            done[name] = {key: counts}
    return done


class _Rows:
    """The agents' visible rows, read once for the stages; read again after a stage changed them."""

    def __init__(self, store: MemoryStore, agents: list[str]) -> None:
        self.store, self.agents = store, agents
        self.rows: dict[str, Rows] | None = None

    def of(self, agent: str) -> Rows:
        if self.rows is None:
            self.rows = visible_rows(self.store, self.agents)
        return self.rows[agent]

    def wrote(self, written: dict[str, DerivedWrite]) -> None:
        if any(w.created or w.applied for w in written.values()):
            self.rows = None
