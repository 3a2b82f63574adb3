"""Any interleaving of agent updates, passes, maintenance and restores (hypothesis, on a real store):

- no acknowledged update is lost: every tag an update was acknowledged for is on the row while it exists,
  and in the pre-image of the event that took it out when it is gone (so ``restore`` brings it back);
- a stale update is refused and changes nothing;
- no superseded row is ever left without its canonical, and every invariant check passes after each step.

Operations run one after another, so this explores orders, not simultaneity; the racing processes of
``test_concurrency.py``, ``test_pass_lease.py`` and ``tests/api/test_load.py`` cover the latter.
"""

from __future__ import annotations

import contextlib
import tempfile
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram_pipeline.invariants import check_all
from engram_pipeline.lifecycle.confidence import decay_confidence
from engram_pipeline.lifecycle.consolidation import consolidate
from engram_pipeline.lifecycle.contradictions import detect_contradictions
from engram_pipeline.lifecycle.corpus_merge import apply_corpus_merge, consolidate_corpus
from engram_pipeline.lifecycle.decay import decay_importance
from engram_pipeline.lifecycle.promotion import promote_stm
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore, VersionConflict
from engram_pipeline.store.errors import NothingToRestore

pytestmark = pytest.mark.slow

T0 = datetime(2026, 3, 1, tzinfo=UTC)
CONTENTS = (
    "User lives in Berlin",
    "User lives in Munich",
    "The user lives in Berlin.",
    "The deploy runs every night at two",
    "Deploy runs nightly at two",
    "User prefers dark mode",
    "When the build fails, clear the cache",
    "When a build fails, we clear the cache",
)
PASSES = ("decay", "confidence", "contradictions", "merge", "consolidate", "promote", "maintain")

op = st.one_of(
    st.tuples(st.just("update"), st.integers(0, len(CONTENTS) - 1)),
    st.tuples(st.just("stale_update"), st.integers(0, len(CONTENTS) - 1)),
    st.tuples(st.just("restore"), st.integers(0, len(CONTENTS) - 1)),
    st.tuples(st.just("pass"), st.sampled_from(PASSES)),
)


def run_pass(store: MemoryStore, name: str, now: datetime) -> None:
    if name == "decay":
        decay_importance(store, "a", now=now)
    elif name == "confidence":
        decay_confidence(store, "a", now=now)
    elif name == "contradictions":
        detect_contradictions(store, "a", now=now)
    elif name == "merge":
        plan = consolidate_corpus(store, "a", now=now)
        if plan.plan_id and plan.clusters:
            apply_corpus_merge(store, "a", plan.plan_id, now=now)
    elif name == "consolidate":
        consolidate(store, "a", scope="full", now=now)
    elif name == "promote":
        promote_stm(store, "a", now=now)
    else:
        store.maintain()


def pre_image_tags(store: MemoryStore, memory_id: str) -> set[str]:
    found = store.engine.last_pre_image(memory_id)
    return set(found[0]["tags"] or []) if found else set()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=3, max_size=12), policy=st.sampled_from(["signal", "safe", "seed"]))
def test_no_interleaving_loses_an_acknowledged_update(ops: list[tuple[str, Any]], policy: str) -> None:
    env = {"ENGRAM_EMBEDDER": "hashing", "ENGRAM_RETENTION_POLICY": policy}
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.open(tmp, settings=Settings.from_env(env))
        ids = []
        for i, text in enumerate(CONTENTS):
            kind = "episodic" if i in (0, 2, 6, 7) else "semantic"
            outcome = "success" if i >= 6 else None
            at = T0 - timedelta(days=10 * i)  # some old enough to prune (seed), all ageing as the passes run
            made = store.remember("a", text, kind=kind, outcome=outcome, memory_id=f"m{i}", created_at=at)
            ids.append(made.memory["id"])
        acknowledged: dict[str, set[str]] = {}
        now = T0
        for step, (kind, arg) in enumerate(ops):
            now += timedelta(days=9)  # passes see time move: decay scores fall, confidence fades
            if kind == "pass":
                run_pass(store, arg, now)
            else:
                mid = ids[arg]
                rows = store.get_many([mid])
                if kind == "restore":
                    # nothing hidden, or a restore that would revert a newer edit: refused, nothing written
                    with contextlib.suppress(NothingToRestore, VersionConflict):
                        store.restore(mid, expected_version=rows[0]["version"] if rows else None)
                elif rows:
                    row, tag = rows[0], f"t{step}"
                    if kind == "update":
                        store.update(mid, expected_version=row["version"], tags=[*(row["tags"] or []), tag])
                        acknowledged.setdefault(mid, set()).add(tag)
                    else:
                        with pytest.raises(VersionConflict):
                            store.update(mid, expected_version=row["version"] + 1, tags=["never"])  # not read
            for mid, tags in acknowledged.items():
                rows = store.get_many([mid])
                held = set(rows[0]["tags"] or []) if rows else pre_image_tags(store, mid)
                assert tags <= held, (step, kind, arg, mid, tags, held)
            assert all(r.passed for r in check_all(store, "a")), [r.as_dict() for r in check_all(store, "a")]
