"""Consolidation stage 4: a dense group of consistent, confident facts about one subject becomes a schema.

Sources: the agent's visible semantic memories with confidence >= ``ENGRAM_SCHEMA_MIN_CONFIDENCE``. Their
claims (negated ones aside) become attributes of their subject:

- ``User lives in / is based in X`` -> ``location``; ``works at`` -> ``employer``; ``prefers``, ``uses``,
  ``likes``, ``has``, ``is`` -> the relation's name;
- a possessive copula about the user ("My editor is vim", "The user's language is Python") -> attribute
  ``editor`` / ``language`` of subject ``user``.

Single-valued attributes must be consistent: two sources with different values drop the attribute (it is
listed under ``metadata.conflicts``, for the contradiction pass to settle). ``uses``, ``likes`` and ``has``
are sets (a user uses several tools). A subject with at least ``ENGRAM_SCHEMA_MIN_ATTRIBUTES`` attributes gets
one ``kind="schema"`` memory::

    Profile of user: editor=vim; employer=Acme; location=Berlin; prefers=Python

with the attributes as JSON in ``metadata.attributes``, confidence the mean of its sources', and
``derived-from`` links to its sources. When the attributes change, the schema row is updated (compare-and-set:
content, hash, vector, metadata, confidence) and links to new sources are added; it is never duplicated, and
when nothing changed nothing is written.

When the agent has no schema and no subject qualifies, the stage says why (``none_qualified`` of the report):
how many beliefs were confident enough, and the subject that came closest with its count of attributes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram_pipeline.lifecycle._derived import DerivedPlan, Rows, visible_rows, write_derived
from engram_pipeline.lifecycle.beliefs import _POSSESSIVE, ACTOR, claim_value, surface
from engram_pipeline.lifecycle.extractors import Extractor, default_extractor
from engram_pipeline.model import Memory, content_hash, dumps_metadata, loads_metadata, utcnow
from engram_pipeline.visibility import is_visible

if TYPE_CHECKING:
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore
    from engram_pipeline.store.links import Link

ATTRIBUTE = {"lives_in": "location", "based_in": "location", "works_at": "employer"}
MULTI = frozenset({"uses", "likes", "has"})


@dataclass(frozen=True)
class SchemaReport:
    sources_scanned: int
    subjects: int  # subjects with enough attributes
    schemas_created: int
    schemas_updated: int
    skipped_concurrent_edit: int
    created_ids: tuple[str, ...] = ()
    none_qualified: str = ""  # why the agent has no schema and gets none (see the module docstring)


def attributes_by_subject(
    rows: list[Memory], extractor: Extractor
) -> dict[str, tuple[dict[str, str], list[str], dict[str, float]]]:
    """subject -> (attributes, conflicting attribute names, source id -> confidence)."""
    values: dict[str, dict[str, dict[str, tuple[str, set[str]]]]] = defaultdict(lambda: defaultdict(dict))
    for row, claims in zip(rows, extractor.extract_claims([r["content"] for r in rows]), strict=True):
        for c in claims:
            if c.negated:
                continue
            subject, attr = c.subject, ATTRIBUTE.get(c.relation, c.relation)
            if c.relation == "is" and subject != "user" and _POSSESSIVE.match(c.text):
                subject, attr = "user", c.subject
            value = claim_value(c)
            spelled, ids = values[subject][attr].get(value, (surface(value, [c.text]), set()))
            ids.add(row["id"])
            values[subject][attr][value] = (spelled, ids)
    conf = {r["id"]: float(r["confidence"] or 0.0) for r in rows}
    out = {}
    for subject, attrs in values.items():
        chosen: dict[str, str] = {}
        conflicts: list[str] = []
        sources: dict[str, float] = {}
        for attr, by_value in sorted(attrs.items()):
            if len(by_value) > 1 and attr not in MULTI:
                conflicts.append(attr)
                continue
            chosen[attr] = ", ".join(by_value[v][0] for v in sorted(by_value))
            for _, ids in by_value.values():
                sources.update({i: conf[i] for i in ids})
        out[subject] = (chosen, conflicts, sources)
    return out


def render_schema(subject: str, attributes: dict[str, str]) -> str:
    return f"Profile of {subject}: " + "; ".join(f"{k}={v}" for k, v in sorted(attributes.items()))


def derive_schemas(
    store: MemoryStore,
    agent_id: str,
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    extractor: Extractor | None = None,
) -> SchemaReport:
    """Create or update one schema per subject with enough consistent, confident attributes. The stage for one
    agent of :func:`~engram_pipeline.lifecycle.consolidation.consolidation_sweep`."""
    now = now or utcnow()
    extractor = extractor or default_extractor()
    rows = visible_rows(store, [agent_id])[agent_id]
    plan, scanned, subjects = plan_schemas(store.settings, agent_id, rows, now=now, run_id=run_id, extractor=extractor)
    done = write_derived(store, [plan], actor=ACTOR, action="update_schema", run_id=run_id, now=now)[agent_id]
    return SchemaReport(
        scanned, subjects, len(done.created), len(done.applied), len(done.skipped), done.created, plan.none_qualified
    )


def plan_schemas(
    settings: Settings,
    agent_id: str,
    rows: Rows,
    *,
    now: datetime,
    run_id: str | None,
    extractor: Extractor,
    relink: bool = False,
) -> tuple[DerivedPlan, int, int]:
    """The schemas to create and update for one agent from its visible ``rows`` (by kind); also the number of
    sources scanned (semantic rows at ``ENGRAM_SCHEMA_MIN_CONFIDENCE`` or above) and of subjects. ``relink``
    (a resumed run): also the links of the schemas this run already created or updated."""
    s = settings
    floor = float(s.schema_min_confidence)
    sources_rows = [r for r in rows.get("semantic", []) if r["confidence"] is not None and r["confidence"] >= floor]
    every = attributes_by_subject(sources_rows, extractor)
    subjects = {subj: found for subj, found in every.items() if len(found[0]) >= s.schema_min_attributes}
    existing = {loads_metadata(r).get("schema_subject"): r for r in rows.get("schema", [])}
    specs, changes, new_links = [], [], []
    for subject in sorted(subjects):
        attrs, conflicts, sources = subjects[subject]
        content = render_schema(subject, attrs)
        confidence = round(sum(sources.values()) / len(sources), 6)
        meta = {
            "schema_subject": subject,
            "attributes": attrs,
            "conflicts": conflicts,
            "sources": sorted(sources),
            "derived_by": ACTOR,
            "run_id": run_id,
            "extractor": extractor.name,
        }
        row = existing.get(subject)
        if row is None:
            specs.append(
                {"content": content, "confidence": confidence, "metadata": meta, "sources": sorted(sources.items())}
            )
            continue
        old = loads_metadata(row)
        if old.get("attributes") == attrs:
            continue
        meta["updated_at"] = now.isoformat()
        changes.append(
            {
                "id": row["id"],
                "version": row["version"],
                "content": content,
                "content_hash": content_hash(agent_id, content),
                "confidence": confidence,
                "metadata": dumps_metadata(meta),
            }
        )
        new_links += [
            {"agent_id": agent_id, "src_id": row["id"], "dst_id": i, "rel": "derived-from", "score": sources[i]}
            for i in sorted(set(sources) - set(old.get("sources", [])))
        ]
    planned = {c["id"]: c for c in changes}

    def redo(fresh: Memory) -> dict[str, Any] | None:
        # the planned attributes still stand (they come from the sources, not from the schema row)
        return {**planned[fresh["id"]], "version": fresh["version"]} if is_visible(fresh) else None

    why = ""
    if not subjects and not rows.get("schema"):
        closest = max(every.items(), key=lambda kv: (len(kv[1][0]), kv[0]), default=None)
        why = (
            f"no subject has {s.schema_min_attributes} consistent attributes in the {len(sources_rows)} beliefs"
            f" at confidence {floor:g} or more" + (f" (closest: {closest[0]}, {len(closest[1][0])})" if closest else "")
        )
    plan = DerivedPlan(
        agent_id,
        "schema",
        specs,
        changes,
        redo=redo,
        links=lambda applied: [link for link in new_links if link["src_id"] in applied],
        embed_changes=True,
        relinks=_relinks(rows, now=now, run_id=run_id) if relink else [],
        none_qualified=why,
    )
    return plan, len(sources_rows), len(subjects)


def _relinks(rows: Rows, *, now: datetime, run_id: str | None) -> list[Link]:
    """The links of schemas that run ``run_id`` created, or updated at ``now``, to their sources (scored by the
    sources' confidence, as when they were written)."""
    conf = {r["id"]: float(r["confidence"] or 0.0) for r in rows.get("semantic", [])}
    out: list[Link] = []
    for r in rows.get("schema", []):
        meta = loads_metadata(r)
        if meta.get("run_id") != run_id and meta.get("updated_at") != now.isoformat():
            continue
        out += [
            {"agent_id": r["agent_id"], "src_id": r["id"], "dst_id": i, "rel": "derived-from", "score": conf[i]}
            for i in meta.get("sources", [])
            if i in conf
        ]
    return out


def schema_attributes(row: Memory) -> dict[str, str]:
    """The attributes of a schema row (``metadata.attributes``)."""
    return dict(json.loads(row["metadata"]).get("attributes", {})) if row.get("metadata") else {}
