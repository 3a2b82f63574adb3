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
the ``consolidate`` cursor); ``full`` considers all. A killed run resumes with the same ``now`` and the same
watermark and skips the stages it finished (re-running one would be harmless anyway).
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

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engram_pipeline.lifecycle._common import PassCursor
from engram_pipeline.lifecycle.archival import ArchivalReport, archive_faded
from engram_pipeline.lifecycle.beliefs import BeliefReport, extract_beliefs
from engram_pipeline.lifecycle.episodes import (
    CONSOLIDATE_PASS,
    SCOPES,
    EpisodeClusters,
    cluster_episodes,
    last_watermark,
)
from engram_pipeline.lifecycle.extractors import Extractor, default_extractor
from engram_pipeline.lifecycle.procedures import ProcedureReport, detect_procedures
from engram_pipeline.lifecycle.schemas import SchemaReport, derive_schemas
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
    """Run the five stages for ``agent_id`` and record the ``recent`` watermark; see the module docstring."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    extractor = extractor or default_extractor()
    previous = last_watermark(store, agent_id)
    cursor = PassCursor.deferred(store, CONSOLIDATE_PASS, agent_id, now=now, run_id=run_id)
    state = cursor.state
    if "since" not in state:  # a new run: remember where the last one stopped (a resumed run keeps it)
        state["since"] = previous
    now, run = cursor.now, cursor.run_id
    done: dict[str, dict[str, int]] = state.setdefault("stages", {})

    def stage(name: str, counts: dict[str, int]) -> None:
        # A stage that wrote begins the run (a cursor before it would only say "nothing yet"); an idle run
        # writes no cursor at all, and the next one starts from the same watermark.
        done[name] = counts
        if any(counts.values()):
            cursor.begin()
        if not cursor.pending:
            store.set_cursor(CONSOLIDATE_PASS, agent_id, state)

    clusters = cluster_episodes(store, agent_id, scope=scope, graph=graph, now=now, since=state["since"])
    if clusters.episodes_scanned:  # new episodes to distil: the stages below are work, resumable from here
        cursor.begin()
    if "beliefs" not in done:
        b = extract_beliefs(store, agent_id, clusters, now=now, run_id=run, extractor=extractor)
        stage(
            "beliefs",
            {"created": b.beliefs_created, "reinforced": b.beliefs_reinforced, "skipped": b.skipped_concurrent_edit},
        )
    if "procedures" not in done:
        p = detect_procedures(store, agent_id, clusters if scope == "recent" else None, now=now, run_id=run)
        stage(
            "procedures",
            {
                "created": p.procedures_created,
                "reinforced": p.procedures_reinforced,
                "skipped": p.skipped_concurrent_edit,
            },
        )
    if "schemas" not in done:
        sc = derive_schemas(store, agent_id, now=now, run_id=run, extractor=extractor)
        stage(
            "schemas",
            {"created": sc.schemas_created, "updated": sc.schemas_updated, "skipped": sc.skipped_concurrent_edit},
        )
    if "archival" not in done:
        a = archive_faded(store, agent_id, now=now, run_id=run)
        stage("archival", {"archived": a.archived, "skipped": a.skipped_concurrent_edit})
    summary = cursor.finish(watermark=clusters.watermark, scope=scope)
    skipped = sum(counts.get("skipped", 0) for counts in done.values())
    return ConsolidationReport(
        episodes_scanned=clusters.episodes_scanned,
        clusters=len(clusters.clusters),
        beliefs_created=done["beliefs"]["created"],
        beliefs_reinforced=done["beliefs"]["reinforced"],
        procedures_created=done["procedures"]["created"],
        procedures_reinforced=done["procedures"]["reinforced"],
        schemas_created=done["schemas"]["created"],
        schemas_updated=done["schemas"]["updated"],
        archived=done["archival"]["archived"],
        skipped_concurrent_edit=skipped,
        cursor={**summary, "since": state["since"], "watermark": clusters.watermark},
    )
