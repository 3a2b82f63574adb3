"""Consolidation stage 3: successful trigger-action patterns in episodes become procedural memories.

An episode has a trigger and an action when its metadata records them (``metadata.trigger`` and
``metadata.action``: they win), or when its text, read past its context and speaker prefixes
(``Session 3:``, ``[2023-05-08]``, ``Kim:``; :mod:`engram_pipeline.utterances`), has one of the shapes

- ``When / Whenever / If / After / Once <trigger>, [then] [I / we / you should] [do] <action>``
- ``If <trigger> then <action>``
- ``To <trigger>, <action>``
- ``<trigger> -> fixed by <action>`` (also ``=>``, ``:``, ``,``, ``-``; ``solved`` / ``resolved``)
- ``Tried <action> after / when / for <trigger>: worked`` (or ``didn't work``)

A trailing counter (``(3)``, ``#3``, ``[3]``) or outcome (``and it worked``, ``, it always helps``) is not part of
the action. In a dialogue turn the trigger's first person is the speaker (:func:`trigger_action` gives it as
written; the stage resolves it): ``Kim: When I can't sleep, I read a book and it worked.`` is ``When Kim can't
sleep, read a book.``, Kim's routine, apart from Leo's. An episode's outcome is its
``outcome`` column, else a success or failure word in its text (``worked``, ``fixed``, ``resolved`` /
``failed``, ``didn't work``, ``no luck``).

Episodes are grouped by the normalised pair (lowercase, no determiners, no trailing punctuation). Over a group,
``support`` counts its episodes with outcome ``success`` and ``rate = success / (success + failure)``
(episodes without an outcome are not evidence). A group with ``support >= ENGRAM_PROCEDURE_MIN_SUPPORT`` and
``rate >= ENGRAM_PROCEDURE_MIN_SUCCESS_RATE`` becomes the procedural memory ``When <trigger>, <action>.``
with::

    confidence = rate * support / (support + 1)

(the success rate, discounted while the evidence is thin: 2 successes out of 2 give 0.67, 5 of 5 give 0.83).

An existing procedure (``metadata.procedure_key``) is never duplicated. New evidence (episodes not yet in its
``metadata.successes`` / ``metadata.failures``) updates it: new successes reinforce it (``scoring.reinforce``,
``reinforcement_count + 1``); only new failures lower its confidence to the formula's value if that is lower.
No new evidence: nothing is written.

When the agent has no procedure and none qualifies, the stage says why (``none_qualified`` of the report):
no episode states a trigger, an action and an outcome, or how many patterns fell short of the thresholds.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram_pipeline.claims import normalise_value
from engram_pipeline.lifecycle._derived import DerivedPlan, Rows, visible_rows, write_derived
from engram_pipeline.lifecycle.beliefs import ACTOR
from engram_pipeline.lifecycle.episodes import EpisodeClusters
from engram_pipeline.model import Memory, confidence_of, content_hash, dumps_metadata, loads_metadata, utcnow
from engram_pipeline.scoring import reinforce
from engram_pipeline.utterances import drop_speaker, first_person, split_speaker, strip_context

if TYPE_CHECKING:
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore

_WHEN = re.compile(
    r"^\s*(?:whenever|when|if|after|once)\s+(?P<trigger>[^,]+?)\s*,\s*(?:then\s+)?"
    r"(?:(?:i|we|you|the agent|agent)\s+)?(?:(?:should|must|will|can|need to)\s+)?(?:do\s+)?"
    r"(?P<action>[^.!?;]+?)\s*[.!;]?\s*$",
    re.IGNORECASE,
)
_IF_THEN = re.compile(
    r"^\s*if\s+(?P<trigger>.+?)\s+then\s+(?:(?:i|we|you)\s+)?(?:(?:should|must|need to)\s+)?"
    r"(?P<action>[^.!?;]+?)\s*[.!;]?\s*$",
    re.IGNORECASE,
)
_FIXED_BY = re.compile(
    r"^\s*(?P<trigger>[^:,]+?)\s*(?:->|=>|\u2192|\u2014|:|,|-)\s*(?:(?:it|this|that)\s+(?:was\s+)?)?"
    r"(?:fixed|solved|resolved)(?:\s+it)?\s+by\s+(?P<action>[^.!?;]+?)\s*[.!;]?\s*$",
    re.IGNORECASE,
)
_TRIED = re.compile(
    r"^\s*tried\s+(?P<action>.+?)\s+(?:after|when|for|because of|on)\s+(?P<trigger>.+?)\s*(?:[:,\-\u2014]|->)+\s*"
    r"(?P<verdict>.+?)\s*[.!]?\s*$",
    re.IGNORECASE,
)
# "read a book and it worked", "read a book, it always helps": the outcome, not part of the action
_OUTCOME_TAIL = re.compile(
    r"\s*(?:,|;|\band\b|-|\u2014)\s*(?:it|that|this)\s+(?:\w+\s+)?(?:worked|works|helped|helps|fixed it|did the trick"
    r"|failed|didn't work|did not work)\b.*$",
    re.IGNORECASE,
)
_COUNTER = re.compile(r"\s*(?:\(\s*#?\d+\s*\)|\[\s*#?\d+\s*\]|#\d+)\s*$")
_SUCCESS = re.compile(r"\b(?:worked|works now|fixed|resolved|solved|succeeded|success|passed|green)\b", re.IGNORECASE)
_FAILURE = re.compile(
    r"\b(?:failed|fails|didn't work|did not work|no luck|still broken|still failing|no dice|no effect)\b",
    re.IGNORECASE,
)
_TO = re.compile(
    r"^\s*to\s+(?P<trigger>[^,]+?)\s*,\s*(?:(?:i|we|you)\s+)?(?:(?:should|must|need to)\s+)?"
    r"(?P<action>[^.!?;]+?)\s*[.!;]?\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ProcedureReport:
    episodes_scanned: int
    patterns: int  # distinct trigger-action pairs seen
    procedures_created: int
    procedures_reinforced: int  # existing procedures updated by new evidence
    skipped_concurrent_edit: int
    created_ids: tuple[str, ...] = ()
    none_qualified: str = ""  # why the agent has no procedure and gets none (see the module docstring)


def trigger_action(content: str, metadata: dict[str, Any]) -> tuple[str, str] | None:
    """The episode's ``(trigger, action)`` as written (metadata first, then the text shapes), or None."""
    trig, act = metadata.get("trigger"), metadata.get("action")
    if isinstance(trig, str) and isinstance(act, str) and trig.strip() and act.strip():
        return trig.strip(), act.strip().rstrip(".!")
    text = drop_speaker(strip_context(content))
    for pattern in (_TRIED, _WHEN, _IF_THEN, _FIXED_BY, _TO):
        m = pattern.match(text)
        if m:
            action = _OUTCOME_TAIL.sub("", _COUNTER.sub("", m["action"].strip())).strip()
            return m["trigger"].strip(), action
    return None


def text_outcome(content: str, trigger: str | None = None) -> str | None:
    """``success`` / ``failure`` from the words of an episode that records no outcome (failure words win);
    the ``trigger``'s own words do not count ("when the build *fails*, ...")."""
    text = content.replace(trigger, " ") if trigger else content
    if _FAILURE.search(text):
        return "failure"
    return "success" if _SUCCESS.search(text) else None


def procedure_key(trigger: str, action: str) -> str:
    return f"{normalise_value(trigger)}=>{normalise_value(action)}"


def procedure_confidence(success: int, failure: int) -> float:
    rate = success / (success + failure) if success + failure else 0.0
    return rate * success / (success + 1)


def detect_procedures(
    store: MemoryStore,
    agent_id: str,
    clusters_or_none: EpisodeClusters | None,
    *,
    now: datetime | None = None,
    run_id: str | None = None,
) -> ProcedureReport:
    """Create or update procedures from the agent's episodes; see the module docstring. The stage for one agent
    of :func:`~engram_pipeline.lifecycle.consolidation.consolidation_sweep`.

    With ``clusters_or_none`` from a ``recent`` run, only patterns with an episode created after its
    ``since`` are considered (a shortcut: the evidence rule alone already makes re-runs change nothing).
    """
    now = now or utcnow()
    rows = visible_rows(store, [agent_id])[agent_id]
    plan, scanned, patterns = plan_procedures(store.settings, agent_id, rows, clusters_or_none, now=now, run_id=run_id)
    done = write_derived(store, [plan], actor=ACTOR, action="reinforce", run_id=run_id, now=now)[agent_id]
    return ProcedureReport(
        scanned, patterns, len(done.created), len(done.applied), len(done.skipped), done.created, plan.none_qualified
    )


def plan_procedures(
    settings: Settings,
    agent_id: str,
    rows: Rows,
    clusters_or_none: EpisodeClusters | None,
    *,
    now: datetime,
    run_id: str | None,
    relink: bool = False,
) -> tuple[DerivedPlan, int, int]:
    """The procedures to create and update for one agent from its visible ``rows`` (by kind); also the number
    of episodes scanned and of distinct patterns seen. ``relink`` (a resumed run): also the links of the
    procedures this run already created."""
    s = settings
    since = clusters_or_none.since_time if clusters_or_none is not None else None
    episodes = rows.get("episodic", [])
    groups: dict[str, dict[str, Any]] = {}
    speakers: set[str] = set()
    for r in sorted(episodes, key=lambda r: (r["created_at"], r["id"])):
        found = trigger_action(r["content"], loads_metadata(r))
        outcome = r["outcome"] or (text_outcome(r["content"], found[0]) if found else None)
        if found is None or outcome not in ("success", "failure"):
            continue
        speaker = split_speaker(strip_context(r["content"]))[0]
        if speaker is not None:  # a routine of the speaker's: "When I can't sleep" is "When Kim can't sleep"
            speakers.add(speaker)
            found = (first_person(found[0], speaker), found[1])
        g = groups.setdefault(
            procedure_key(*found), {"texts": Counter(), "success": set(), "failure": set(), "new": False}
        )
        g[outcome].add(r["id"])
        if outcome == "success":
            g["texts"][found] += 1
        g["new"] |= since is None or r["created_at"] > since
    procedural = rows.get("procedural", [])
    existing = {loads_metadata(r).get("procedure_key"): r for r in procedural}
    by_hash = {r["content_hash"]: r for r in procedural}
    specs, changes = [], []
    evidence: dict[str, tuple[set[str], set[str]]] = {}
    for key in sorted(groups):
        g = groups[key]
        if not g["new"]:
            continue
        if not g["success"]:
            continue
        # the wording most successes used (the earliest on ties: rows are read oldest first)
        (trig, act), _ = g["texts"].most_common(1)[0]
        lead = trig if trig.split()[0] in speakers else trig[:1].lower() + trig[1:]  # "When Kim can't sleep"
        sentence = f"When {lead}, {act}."
        row = existing.get(key) or by_hash.get(content_hash(agent_id, sentence))
        if row is not None:
            evidence[row["id"]] = (g["success"], g["failure"])
            change = _update(row, g["success"], g["failure"], now)
            if change:
                changes.append(change)
            continue
        success, failure = len(g["success"]), len(g["failure"])
        rate = success / (success + failure)
        if success < s.procedure_min_support or rate < s.procedure_min_success_rate:
            continue
        meta = {
            "procedure_key": key,
            "trigger": trig,
            "action": act,
            "successes": sorted(g["success"]),
            "failures": sorted(g["failure"]),
            "success_rate": round(rate, 6),
            "derived_by": ACTOR,
            "run_id": run_id,
        }
        specs.append(
            {
                "content": sentence,
                "confidence": procedure_confidence(success, failure),
                "metadata": meta,
                "sources": [(e, 1.0) for e in sorted(g["success"])],
            }
        )
    if procedural or specs:
        why = ""
    elif not groups:
        why = "no episode states a trigger, an action and an outcome (When X, Y ... worked)"
    else:
        why = (
            f"{len(groups)} trigger-action patterns, none with {s.procedure_min_support} successes at a success"
            f" rate of {s.procedure_min_success_rate:g} or more"
        )
    plan = DerivedPlan(
        agent_id,
        "procedural",
        specs,
        changes,
        redo=lambda r: _update(r, *evidence.get(r["id"], (set(), set())), now),
        relinks=[
            {"agent_id": agent_id, "src_id": r["id"], "dst_id": e, "rel": "derived-from", "score": 1.0}
            for r in procedural
            if relink and r["source"] == "derived" and loads_metadata(r).get("run_id") == run_id
            for e in loads_metadata(r).get("successes", [])
        ],
        none_qualified=why,
    )
    return plan, len(episodes), len(groups)


def _update(row: Memory, success: set[str], failure: set[str], now: datetime) -> dict[str, Any] | None:
    """The change new evidence makes to an existing procedure, or None when there is none."""
    meta = loads_metadata(row)
    old_s, old_f = set(meta.get("successes", [])), set(meta.get("failures", []))
    new_s, new_f = success - old_s, failure - old_f
    if not new_s and not new_f:
        return None
    all_s, all_f = old_s | success, old_f | failure
    conf = confidence_of(row)
    count = int(row["reinforcement_count"] or 0)
    if new_s:
        conf, count = reinforce(conf), count + 1
    else:
        conf = min(conf, procedure_confidence(len(all_s), len(all_f)))
    meta.update(
        successes=sorted(all_s),
        failures=sorted(all_f),
        updated_by_evidence_at=now.isoformat(),
        success_rate=round(len(all_s) / (len(all_s) + len(all_f)), 6),
    )
    return {
        "id": row["id"],
        "version": row["version"],
        "confidence": conf,
        "reinforcement_count": count,
        "metadata": dumps_metadata(meta),
    }
