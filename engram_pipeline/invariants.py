"""The store's invariants, checked per agent: pure functions over a store and an agent id.

Each function reads one agent's rows (a few columns, never the vectors), the links and the audit table, and
returns an :class:`InvariantResult` naming every offending row. Dagster runs them as asset checks after each
pass (``assets/checks.py``); the API or CLI can run them too.

- :func:`superseded_rows_have_canonical`: a row hidden behind another (``superseded_by``, or status
  ``superseded``) points at a canonical that exists, and a ``duplicate-of`` or ``supersedes`` link joins them.
- :func:`contradicted_rows_have_partner`: a ``contradicted`` row names its partners, and each partner is a row
  of the store or was hidden with a pre-image (so ``restore`` can bring it back).
- :func:`hidden_rows_have_audit_pre_image`: every archived or superseded row, and every row that left the
  ``memories`` table (pruned, deleted), has an audit event that took it out of recall with its full pre-image.
- :func:`only_held_rows_leave_recall`: under the ``safe`` and ``signal`` retention policies, every row a pass
  archived (and that is still archived) is held by a visible derived row or a canonical, or (``signal``) is
  noise by its stored information score, unpinned and not derived; and every row decay pruned was a merged
  duplicate (:mod:`engram_pipeline.lifecycle.retention`). Under ``seed`` it passes with nothing checked.
- :func:`versions_never_go_backwards`: no row's version is below the one the previous check saw. The versions
  seen are kept in the ``cursors`` table (pass ``invariants/versions``), as a running maximum per id.

>>> from engram_pipeline.settings import Settings
>>> from engram_pipeline.store import MemoryStore
>>> store = MemoryStore.open("memory://", settings=Settings().replace(embedder="hashing"))
>>> _ = store.remember("alice", "User prefers dark mode")
>>> [r.passed for r in check_all(store, "alice")]
[True, True, True, True, True]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engram_pipeline.lifecycle import archival, confidence, decay
from engram_pipeline.lifecycle.retention import SEED, holders
from engram_pipeline.model import utcnow
from engram_pipeline.store.audit import HIDING_ACTIONS
from engram_pipeline.store.sql import in_list, lit
from engram_pipeline.visibility import VISIBLE_SQL

if TYPE_CHECKING:
    from engram_pipeline.store import MemoryStore

# Offending rows named in a result; the count is always exact.
MAX_LISTED = 20
VERSIONS_PASS = "invariants/versions"
MERGE_RELS = ("duplicate-of", "supersedes")


@dataclass(frozen=True)
class InvariantResult:
    name: str
    agent_id: str
    passed: bool
    checked: int  # rows the invariant applies to
    violation_count: int
    violations: tuple[dict[str, Any], ...]  # the first MAX_LISTED: {"id", "problem"}
    details: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "agent_id": self.agent_id,
            "passed": self.passed,
            "checked": self.checked,
            "violation_count": self.violation_count,
            "violations": list(self.violations),
            "details": self.details,
        }


def _result(name: str, agent_id: str, checked: int, problems: list[dict[str, Any]], **details: Any) -> InvariantResult:
    problems.sort(key=lambda p: p["id"])
    return InvariantResult(name, agent_id, not problems, checked, len(problems), tuple(problems[:MAX_LISTED]), details)


def _rows(store: MemoryStore, agent_id: str, columns: list[str], where: str | None = None) -> list[dict[str, Any]]:
    return store.engine.scan(agent_id, columns=columns, where=where).to_pylist()


def _present(store: MemoryStore, ids: Iterable[str]) -> set[str]:
    return {r["id"] for r in store.get_many(list(ids), columns=["id"])}


def _hiding_events(store: MemoryStore, agent_id: str, ids: Iterable[str] | None = None) -> dict[str, set[str]]:
    """``{memory_id: {actions}}`` of the audit events that took a row out of recall with a pre-image."""
    table = store.engine.audit_for_agent(
        agent_id,
        actions=HIDING_ACTIONS,
        memory_ids=None if ids is None else list(ids),
        where="before IS NOT NULL",
        columns=["memory_id", "action"],
    )
    out: dict[str, set[str]] = {}
    for mid, action in zip(table["memory_id"].to_pylist(), table["action"].to_pylist(), strict=True):
        out.setdefault(mid, set()).add(action)
    return out


def superseded_rows_have_canonical(store: MemoryStore, agent_id: str) -> InvariantResult:
    """Every superseded row has an existing canonical and a ``duplicate-of`` or ``supersedes`` link to it."""
    rows = _rows(
        store, agent_id, ["id", "status", "superseded_by"], "superseded_by IS NOT NULL OR status = 'superseded'"
    )
    problems: list[dict[str, Any]] = []
    pairs = {r["id"]: r["superseded_by"] for r in rows if r["superseded_by"]}
    problems += [
        {"id": r["id"], "problem": "status superseded without superseded_by"} for r in rows if not r["superseded_by"]
    ]
    existing = _present(store, set(pairs.values())) if pairs else set()
    linked: set[frozenset[str]] = set()
    if pairs:
        links = store.engine.links_of(list(pairs), rel=None)
        linked = {frozenset((lk["src_id"], lk["dst_id"])) for lk in links if lk["rel"] in MERGE_RELS}
    for mid, canonical in pairs.items():
        if canonical not in existing:
            problems.append({"id": mid, "problem": f"canonical {canonical} does not exist"})
        elif frozenset((mid, canonical)) not in linked:
            problems.append({"id": mid, "problem": f"no duplicate-of/supersedes link to canonical {canonical}"})
    return _result("superseded_rows_have_canonical", agent_id, len(rows), problems)


def contradicted_rows_have_partner(store: MemoryStore, agent_id: str) -> InvariantResult:
    """Every contradicted row names its partners, and each partner exists or can be restored."""
    rows = _rows(store, agent_id, ["id", "contradiction_with"], "status = 'contradicted'")
    partners = {p for r in rows for p in (r["contradiction_with"] or [])}
    existing = _present(store, partners) if partners else set()
    restorable = set(_hiding_events(store, agent_id, partners - existing))
    problems: list[dict[str, Any]] = []
    for r in rows:
        named = r["contradiction_with"] or []
        if not named:
            problems.append({"id": r["id"], "problem": "contradicted without a partner in contradiction_with"})
        lost = [p for p in named if p not in existing and p not in restorable]
        if lost:
            problems.append({"id": r["id"], "problem": f"partner(s) gone without a pre-image: {', '.join(lost)}"})
    return _result("contradicted_rows_have_partner", agent_id, len(rows), problems)


def hidden_rows_have_audit_pre_image(store: MemoryStore, agent_id: str) -> InvariantResult:
    """Every archived or superseded row, and every row gone from ``memories``, has an audited pre-image."""
    hidden = _rows(store, agent_id, ["id", "status"], f"NOT ({VISIBLE_SQL})")
    audited = store.engine.audit_for_agent(agent_id, columns=["memory_id"])
    ever = set(audited["memory_id"].to_pylist())
    gone = ever - _present(store, ever) if ever else set()
    events = _hiding_events(store, agent_id)
    problems = [
        {"id": r["id"], "problem": f"{r['status']} without an audited pre-image"}
        for r in hidden
        if r["id"] not in events
    ]
    problems += [
        {"id": mid, "problem": "gone from memories without an audited pre-image"} for mid in gone - set(events)
    ]
    return _result(
        "hidden_rows_have_audit_pre_image",
        agent_id,
        len(hidden) + len(gone),
        problems,
        hidden=len(hidden),
        gone=len(gone),
    )


# Actors whose archive / prune events the retention policy governs (a person's delete or archive is theirs).
RETENTION_ACTORS = {"archive": (archival.ACTOR, confidence.ACTOR), "prune": (decay.ACTOR,)}


def only_held_rows_leave_recall(store: MemoryStore, agent_id: str) -> InvariantResult:
    """Under the ``safe`` and ``signal`` retention policies, what a pass archived or pruned was held elsewhere
    (or, under ``signal``, archived as noise)."""
    name = "only_held_rows_leave_recall"
    if store.settings.retention_policy == SEED:
        return _result(name, agent_id, 0, [], policy=SEED)
    conds = " OR ".join(f"(action = {lit(a)} AND actor IN {in_list(actors)})" for a, actors in RETENTION_ACTORS.items())
    table = store.engine.audit_for_agent(agent_id, where=conds, columns=["memory_id", "action"])
    archived = {
        m for m, a in zip(table["memory_id"].to_pylist(), table["action"].to_pylist(), strict=True) if a == "archive"
    }
    pruned = set(table["memory_id"].to_pylist()) - archived
    held = holders(store, agent_id)
    still = {r["id"] for r in _rows(store, agent_id, ["id", "status"], "status = 'archived'")} & archived
    gone = pruned - _present(store, pruned) if pruned else set()
    merged_links = (
        {
            lk["src_id"] if lk["rel"] == "duplicate-of" else lk["dst_id"]
            for lk in store.engine.links_of(sorted(gone))
            if lk["rel"] in MERGE_RELS
        }
        if gone
        else set()
    )
    problems = [
        {"id": m, "problem": "archived by a pass, but nothing visible holds it and it is not noise"}
        for m in still
        if not held.may_archive(m) and not held.is_noise(m)
    ]
    problems += [{"id": m, "problem": "pruned by decay without being a merged duplicate"} for m in gone - merged_links]
    return _result(name, agent_id, len(still) + len(gone), problems, archived=len(still), pruned=len(gone))


def versions_never_go_backwards(store: MemoryStore, agent_id: str, *, record: bool = True) -> InvariantResult:
    """No row's version is below the highest version an earlier check saw; with ``record``, remember these.

    A row that has left the table keeps its last version in the record, so a restore that came back with an
    older version is caught too.
    """
    table = store.engine.scan(agent_id, columns=["id", "version"])
    now = dict(zip(table["id"].to_pylist(), table["version"].to_pylist(), strict=True))
    saved = store.engine.get_cursor(VERSIONS_PASS, agent_id) or {}
    before: dict[str, int] = saved.get("versions", {})
    problems = [
        {"id": mid, "problem": f"version {v} is below {before[mid]}, seen at {saved.get('checked_at')}"}
        for mid, v in now.items()
        if mid in before and v < before[mid]
    ]
    merged = {**before, **{mid: max(v, before.get(mid, v)) for mid, v in now.items()}}
    if record and merged != before:  # nothing moved since the last check: the record already says it all
        store.engine.set_cursor(VERSIONS_PASS, agent_id, {"versions": merged, "checked_at": utcnow().isoformat()})
    return _result(
        "versions_never_go_backwards",
        agent_id,
        len(now),
        problems,
        compared=len(now.keys() & before.keys()),
        previous_check=saved.get("checked_at"),
    )


INVARIANTS: dict[str, Callable[[MemoryStore, str], InvariantResult]] = {
    "superseded_rows_have_canonical": superseded_rows_have_canonical,
    "contradicted_rows_have_partner": contradicted_rows_have_partner,
    "hidden_rows_have_audit_pre_image": hidden_rows_have_audit_pre_image,
    "only_held_rows_leave_recall": only_held_rows_leave_recall,
    "versions_never_go_backwards": versions_never_go_backwards,
}


def check_all(store: MemoryStore, agent_id: str) -> list[InvariantResult]:
    """Every invariant for one agent, in :data:`INVARIANTS` order."""
    return [check(store, agent_id) for check in INVARIANTS.values()]
