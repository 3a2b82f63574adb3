"""Consolidation stage 2: repeated claims in an episode cluster become a semantic memory (a belief).

Claims ``(subject, relation, value)`` are read from each episode by the extractor (default: the lexical parser
of :mod:`engram_pipeline.claims`). Inside one cluster every episode casts at most one vote per *slot*:

- a functional relation (``lives_in``/``based_in``, ``works_at``, ``prefers``, ``uses``, ``is``) has one slot
  per (subject, relation family): its votes are values (with polarity), and they compete;
- a multi-valued relation (``likes``, ``has``) has one slot per (subject, relation, value): the votes are the
  polarities ("likes cats" vs "does not like cats").

The belief is the strict majority vote of a slot, supported by at least two episodes, with::

    confidence = consistency * (1 - exp(-voters / ENGRAM_BELIEF_SUPPORT_K))

``consistency`` = majority votes / voters. No strict majority, a single supporter, or a confidence below
``ENGRAM_ARCHIVE_CONFIDENCE`` (it would be archived at once) yields no belief. The belief is rendered as a
clean sentence ("User lives in Berlin.") keeping the value's casing from the episodes.

A belief that already exists (a visible semantic row with the same subject, relation family, value and
polarity: a derived row by its ``belief_key``, any other by its parsed claim) is never duplicated: when the
cluster brings supporting episodes it has not counted yet (``metadata.support``), it is reinforced
(``scoring.reinforce``, ``reinforcement_count + 1``); otherwise it is left alone, so re-running changes
nothing. An existing row that holds *another* value in the same functional slot is not touched: the new
belief records it under ``metadata.conflicts_with`` and the contradiction pass decides between them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from engram_pipeline.claims import Claim, head_value, same_value, transient
from engram_pipeline.lexicon import FUNCTIONAL_RELATIONS
from engram_pipeline.lifecycle._common import CONSOLIDATION_ACTOR
from engram_pipeline.lifecycle._derived import DerivedPlan, Rows, visible_rows, write_derived
from engram_pipeline.lifecycle.episodes import EpisodeClusters
from engram_pipeline.lifecycle.extractors import Extractor, claims_of, default_extractor
from engram_pipeline.model import Memory, confidence_of, content_hash, dumps_metadata, loads_metadata, utcnow
from engram_pipeline.scoring import reinforce
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore
    from engram_pipeline.store.links import Link

ACTOR = CONSOLIDATION_ACTOR
FUNCTIONAL = FUNCTIONAL_RELATIONS
_PHRASES = {
    "lives_in": ("lives in", "does not live in"),
    "based_in": ("is based in", "is not based in"),
    "works_at": ("works at", "does not work at"),
    "prefers": ("prefers", "does not prefer"),
    "uses": ("uses", "does not use"),
    "likes": ("likes", "does not like"),
    "has": ("has", "does not have"),
    "is": ("is", "is not"),
}
_POSSESSIVE = re.compile(r"^\s*(?:my|the user's|user's|our)\s+", re.IGNORECASE)


@dataclass(frozen=True)
class BeliefReport:
    clusters: int
    beliefs_created: int
    beliefs_reinforced: int
    conflicts: int  # existing rows with another value in a new belief's slot (left to the contradiction pass)
    skipped_concurrent_edit: int
    created_ids: tuple[str, ...] = ()


@dataclass
class Candidate:
    key: str
    sentence: str
    confidence: float
    consistency: float
    voters: int
    support: set[str]
    slot: tuple[str, ...]


def family(relation: str) -> str:
    """``based_in`` and ``lives_in`` say the same thing; every other relation is its own family."""
    return "lives_in" if relation == "based_in" else relation


def claim_value(claim: Claim) -> str:
    """The value a belief holds (:func:`engram_pipeline.claims.head_value`)."""
    return head_value(claim.value)


def belief_key(subject: str, relation: str, value: str, negated: bool) -> str:
    return f"{subject}|{family(relation)}|{value}|{'-' if negated else '+'}"


def slot_of(claim: Claim, seen: dict[tuple[str, str], list[str]] | None = None) -> tuple[str, ...]:
    """The slot a claim votes in. With ``seen`` (values met so far per subject and relation), a multi-valued
    claim joins the slot of a value that says the same thing in other words ("two cats" / "2 cats, Tom and
    Jerry")."""
    if claim.relation in FUNCTIONAL:
        return (claim.subject, family(claim.relation))
    value = claim_value(claim)
    if seen is not None:
        known = seen.setdefault((claim.subject, family(claim.relation)), [])
        value = next((v for v in known if same_value(v, value)), value)
        if value not in known:
            known.append(value)
    return (claim.subject, family(claim.relation), value)


def surface(value: str, texts: Iterable[str]) -> str:
    """The value as the texts spell it (most common spelling; capitals first on ties), else as given."""
    pattern = re.compile(r"\b" + r"\W+(?:(?:the|a|an)\W+)?".join(map(re.escape, value.split())) + r"\b", re.I)
    found = Counter(m.group(0) for t in texts if (m := pattern.search(t)))
    if not found:
        return value
    return min(found, key=lambda v: (-found[v], v))


def render(subject: str, relation: str, value: str, negated: bool, texts: Sequence[str]) -> str:
    """A clean sentence for a claim: ``User lives in Berlin.``, ``User's editor is vim.``"""
    if subject == "user":
        subj = "User"
    elif relation == "is" and texts and all(_POSSESSIVE.match(t) for t in texts):
        subj = f"User's {subject}"
    else:
        subj = subject[:1].upper() + subject[1:]
    verb = relation.replace("_", " ")
    base = verb[:-1] if verb.endswith("s") and not verb.endswith("ss") else verb  # "drinks" -> "does not drink"
    phrase = _PHRASES.get(relation, (verb, f"does not {base}"))
    return f"{subj} {phrase[1 if negated else 0]} {surface(value, texts)}."


HEDGED_WEIGHT = 0.5  # "I think X" counts as half a vote


def vote(
    clusters: Sequence[Sequence[str]],
    claims: dict[str, list[Claim]],
    *,
    support_k: float,
    floor: float,
    when: Mapping[str, datetime] | None = None,
) -> dict[str, Candidate]:
    """Beliefs of the clusters by strict majority per slot (see the module docstring), by belief key.

    ``when`` (episode id -> creation time) orders the votes: a change of value ("switched to emacs") starts
    its slot over, so the votes before the newest change do not count against it.
    """
    out: dict[str, Candidate] = {}
    order = (lambda e: (when[e], e)) if when else (lambda e: (datetime.min.replace(tzinfo=UTC), e))
    every: list[dict[tuple[str, ...], dict[str, tuple[str, str, bool, Claim]]]] = []
    newest_change: dict[tuple[str, ...], tuple[datetime, str]] = {}
    seen: dict[tuple[str, str], list[str]] = {}
    for cluster in clusters:
        ballots: dict[tuple[str, ...], dict[str, tuple[str, str, bool, Claim]]] = {}
        for episode in sorted(cluster, key=order):
            for c in claims.get(episode, []):
                if c.past or transient(c.value):
                    continue  # "used to ...", "so tired this week": nothing lasting about now
                # one vote per episode and slot: its first claim there
                slot = slot_of(c, seen)
                ballots.setdefault(slot, {}).setdefault(
                    episode, (c.relation, slot[2] if len(slot) == 3 else claim_value(c), c.negated, c)
                )
        for slot, votes in ballots.items():
            for e, v in votes.items():
                if v[3].changed and not v[2] and (slot not in newest_change or order(e) > newest_change[slot]):
                    newest_change[slot] = order(e)
        every.append(ballots)
    for ballots in every:
        for slot, votes in ballots.items():
            if slot in newest_change:  # a change of value: only the votes from the newest change on count
                votes = {e: v for e, v in votes.items() if order(e) >= newest_change[slot]}
            if not votes:
                continue
            rep = _representatives(Counter((value, negated) for _, value, negated, _ in votes.values()))
            votes = {e: (r, rep[(val, neg)][0], rep[(val, neg)][1], c) for e, (r, val, neg, c) in votes.items()}
            weight = {e: HEDGED_WEIGHT if v[3].hedged else 1.0 for e, v in votes.items()}
            tally: dict[tuple[str, bool], float] = {}
            for e, (_, value, negated, _) in votes.items():
                tally[(value, negated)] = tally.get((value, negated), 0.0) + weight[e]
            (value, negated), top = min(tally.items(), key=lambda kv: (-kv[1], kv[0]))
            voters = sum(weight.values())
            winners = {e: v for e, v in votes.items() if (v[1], v[2]) == (value, negated)}
            if len(winners) < 2 or 2 * top <= voters:
                continue
            consistency = top / voters
            confidence = consistency * (1.0 - math.exp(-voters / support_k))
            if confidence < floor:
                continue
            relation = min(Counter(v[0] for v in winners.values()).items(), key=lambda kv: (-kv[1], kv[0]))[0]
            texts = sorted(v[3].text for v in winners.values())
            key = belief_key(slot[0], relation, value, negated)
            cand = Candidate(
                key,
                render(slot[0], relation, value, negated, texts),
                confidence,
                consistency,
                len(votes),
                set(winners),
                slot,
            )
            if key in out:  # the same belief from two clusters: pool the support
                cand.support |= out[key].support
                cand.confidence = max(cand.confidence, out[key].confidence)
            out[key] = cand
    return out


def slot_groups(
    claims: Mapping[str, Sequence[Claim]], when: Mapping[str, datetime], *, since: datetime | None = None
) -> list[tuple[str, ...]]:
    """Episodes grouped by the slots their claims fill (two or more per group; with ``since``, at least one
    created after it), whatever their wording."""
    by_slot: dict[tuple[str, ...], set[str]] = {}
    seen: dict[tuple[str, str], list[str]] = {}
    for episode, found in claims.items():
        for c in found:
            if not c.past:
                by_slot.setdefault(slot_of(c, seen), set()).add(episode)
    return [
        tuple(sorted(ids))
        for _slot, ids in sorted(by_slot.items())
        if len(ids) >= 2 and (since is None or any(when[i] > since for i in ids))
    ]


def _representatives(values: Counter[tuple[str, bool]]) -> dict[tuple[str, bool], tuple[str, bool]]:
    """Each (value, polarity) mapped to the most frequent value that says the same thing in other words
    (:func:`engram_pipeline.claims.same_value`), with the same polarity."""
    reps: list[tuple[str, bool]] = []
    out: dict[tuple[str, bool], tuple[str, bool]] = {}
    for value, negated in sorted(values, key=lambda vn: (-values[vn], vn)):
        match = next((r for r in reps if r[1] == negated and same_value(r[0], value)), None)
        if match is None:
            reps.append((value, negated))
            match = (value, negated)
        out[(value, negated)] = match
    return out


def existing_index(store: MemoryStore, agent_id: str, kind: str, extractor: Extractor) -> dict[str, Memory]:
    """Visible rows of ``kind`` by belief key: derived rows by ``metadata.belief_key``, others by their one
    claim; also by ``hash:<content_hash>``."""
    return index_rows(store.engine.scan(agent_id, where=f"kind = '{kind}' AND {VISIBLE_SQL}").to_pylist(), extractor)


def index_rows(rows: list[Memory], extractor: Extractor) -> dict[str, Memory]:
    """:func:`existing_index` of rows already read."""
    index: dict[str, Memory] = {}
    plain = [r for r in rows if "belief_key" not in loads_metadata(r)]
    for r, found in zip(plain, extractor.extract_claims([r["content"] for r in plain]), strict=True):
        if len(found) == 1:
            c = found[0]
            index.setdefault(belief_key(c.subject, c.relation, claim_value(c), c.negated), r)
            r["_slot"] = slot_of(c)
    for r in rows:
        meta = loads_metadata(r)
        if "belief_key" in meta:
            index[meta["belief_key"]] = r  # a derived belief wins over a user row saying the same
            r["_slot"] = tuple(meta.get("slot", ()))
        index.setdefault(f"hash:{r['content_hash']}", r)
    return index


def extract_beliefs(
    store: MemoryStore,
    agent_id: str,
    clusters: EpisodeClusters | Sequence[Sequence[str]],
    *,
    now: datetime | None = None,
    run_id: str | None = None,
    extractor: Extractor | None = None,
) -> BeliefReport:
    """Create or reinforce the beliefs of ``clusters``; see the module docstring. The stage for one agent of
    :func:`~engram_pipeline.lifecycle.consolidation.consolidation_sweep`."""
    extractor = extractor or default_extractor()
    now = now or utcnow()
    rows = visible_rows(store, [agent_id])[agent_id]
    plan, groups, conflicts = plan_beliefs(
        store.settings, agent_id, rows, clusters, now=now, run_id=run_id, extractor=extractor
    )
    done = write_derived(store, [plan], actor=ACTOR, action="reinforce", run_id=run_id, now=now)[agent_id]
    return BeliefReport(groups, len(done.created), len(done.applied), conflicts, len(done.skipped), done.created)


def plan_beliefs(
    settings: Settings,
    agent_id: str,
    rows: Rows,
    clusters: EpisodeClusters | Sequence[Sequence[str]],
    *,
    now: datetime,
    run_id: str | None,
    extractor: Extractor,
    relink: bool = False,
) -> tuple[DerivedPlan, int, int]:
    """The beliefs to create and reinforce for one agent from its visible ``rows`` (by kind); also the number
    of groups voted over and of conflicts found. ``relink`` (a resumed run): also the links of the beliefs
    this run already created or reinforced."""
    s = settings
    groups = clusters.clusters if isinstance(clusters, EpisodeClusters) else tuple(map(tuple, clusters))
    since = clusters.since_time if isinstance(clusters, EpisodeClusters) else None
    # Every visible episode's claims: an embedding cluster can split one claim said in different words, so
    # the episodes that speak to the same slot are a group of their own too.
    episodes = rows.get("episodic", [])
    claims = dict(zip([r["id"] for r in episodes], claims_of(extractor, [r["content"] for r in episodes]), strict=True))
    when = {r["id"]: r["created_at"] for r in episodes}
    # An episode that left recall between the clustering read and this one (pruned, merged, archived, deleted)
    # votes no more: it is left out of its cluster and counted as skipped.
    gone = sorted({e for g in groups for e in g} - when.keys())
    groups = tuple(tuple(e for e in g if e in when) for g in groups) if gone else groups
    groups = (*groups, *slot_groups(claims, when, since=since))
    cands = vote(groups, claims, support_k=s.belief_support_k, floor=s.archive_confidence, when=when)
    index = index_rows([dict(r) for r in rows.get("semantic", [])], extractor) if cands else {}

    specs, changes, conflicts = [], [], 0
    support_of: dict[str, set[str]] = {}  # existing row id -> the support a candidate brings it
    old_support: dict[str, set[str]] = {}
    for key in sorted(cands):
        cand = cands[key]
        row = index.get(key) or index.get(f"hash:{content_hash(agent_id, cand.sentence)}")
        if row is not None:
            change = _reinforcement(row, cand.support, now)
            if change:
                support_of[row["id"]] = cand.support
                old_support[row["id"]] = set(loads_metadata(row).get("support", []))
                changes.append(change)
            continue
        rivals = sorted(
            r["id"]
            for k, r in index.items()
            if not k.startswith("hash:") and r.get("_slot") == cand.slot and len(cand.slot) == 2 and k != key
        )
        conflicts += len(set(rivals))
        meta = {
            "belief_key": key,
            "slot": list(cand.slot),
            "support": sorted(cand.support),
            "consistency": round(cand.consistency, 6),
            "voters": cand.voters,
            "extractor": extractor.name,
            "derived_by": ACTOR,
            "run_id": run_id,
        }
        if rivals:
            meta["conflicts_with"] = sorted(set(rivals))
        specs.append(
            {
                "content": cand.sentence,
                "confidence": cand.confidence,
                "metadata": meta,
                "sources": [(e, cand.consistency) for e in sorted(cand.support)],
            }
        )
    derived = {r["id"] for r in index.values() if r.get("source") == "derived"}

    def links(applied: set[str]) -> list[Link]:
        # a reinforced derived belief links to its new supporting episodes too
        return [
            {"agent_id": agent_id, "src_id": mid, "dst_id": e, "rel": "derived-from", "score": 1.0}
            for mid in sorted(applied & derived)
            for e in sorted(support_of[mid] - old_support[mid])
        ]

    plan = DerivedPlan(
        agent_id,
        "semantic",
        specs,
        changes,
        redo=lambda r: _reinforcement(r, support_of.get(r["id"], set()), now),
        links=links,
        relinks=_relinks(rows.get("semantic", []), now=now, run_id=run_id) if relink else [],
        gone=tuple(gone),
    )
    return plan, len(groups), conflicts


def _relinks(rows: list[Memory], *, now: datetime, run_id: str | None) -> list[Link]:
    """The links of derived beliefs that run ``run_id`` created (to their support, scored by the recorded
    consistency) or reinforced at ``now`` (to their support; the ones not stored yet are the new ones)."""
    out: list[Link] = []
    for r in rows:
        meta = loads_metadata(r)
        if r["source"] != "derived" or "belief_key" not in meta:
            continue
        if meta.get("run_id") == run_id:
            score = float(meta.get("consistency", 1.0))
        elif meta.get("reinforced_at") == now.isoformat():
            score = 1.0
        else:
            continue
        out += [
            {"agent_id": r["agent_id"], "src_id": r["id"], "dst_id": e, "rel": "derived-from", "score": score}
            for e in meta.get("support", [])
        ]
    return out


def _reinforcement(row: Memory, support: set[str], now: datetime) -> dict[str, Any] | None:
    """Reinforce ``row`` once if ``support`` holds episodes it has not counted yet; else None."""
    meta = loads_metadata(row)
    known = set(meta.get("support", []))
    new = support - known
    if not new:
        return None
    meta["support"] = sorted(known | support)
    meta["reinforced_at"] = now.isoformat()
    return {
        "id": row["id"],
        "version": row["version"],
        "confidence": reinforce(confidence_of(row)),
        "reinforcement_count": int(row["reinforcement_count"] or 0) + 1,
        "metadata": dumps_metadata(meta),
    }
