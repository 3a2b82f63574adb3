"""Reports say what happened: a dry run's counts read as what it would do."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

from assets.demo import _print_review_hint
from engram_pipeline.lifecycle.corpus_merge import consolidate_corpus
from engram_pipeline.reporting import report_view
from engram_pipeline.store import MemoryStore


def test_dry_run_counts_are_renamed() -> None:
    assert report_view({"merged": 3, "dry_run": True}) == {"would_merge": 3, "dry_run": True}
    assert report_view({"merged": 3, "dry_run": False}) == {"merged": 3, "dry_run": False}
    assert report_view({"pruned": 1}) == {"pruned": 1}


class _Plans:
    """The one engine method the demo's review hint reads (``store.engine.latest_plan``)."""

    def __init__(self, plans: dict[str, dict[str, Any]]) -> None:
        self.plans = plans

    def latest_plan(self, agent_id: str) -> dict[str, Any] | None:
        return self.plans.get(agent_id)


def test_demo_lists_only_plans_with_clusters() -> None:
    cluster = {"canonical": {"id": "c"}, "members": [{"id": "m1"}, {"id": "m2"}]}
    store = SimpleNamespace(
        engine=_Plans(
            {
                "a": {"plan_id": "plan-a", "status": "pending", "body": {"clusters": [cluster]}},
                "b": {"plan_id": "plan-b", "status": "pending", "body": {"clusters": []}},
                "c": {"plan_id": "plan-c", "status": "applied", "body": {"clusters": [cluster]}},
            }
        )
    )
    out = io.StringIO()
    _print_review_hint(store, ["a", "b", "c"], applied=False, out=out)
    text = out.getvalue()
    assert "plan-a  1 clusters, would merge 2 memories" in text
    assert "plan-b" not in text and "plan-c" not in text
    assert "nothing to merge for b" in text


def test_an_empty_plan_is_not_waiting(store: MemoryStore) -> None:
    store.remember("solo", "User prefers dark mode")
    assert consolidate_corpus(store, "solo").clusters == 0
    out = io.StringIO()
    _print_review_hint(store, ["solo"], applied=False, out=out)
    assert "waiting for review" not in out.getvalue() and "nothing to merge for solo" in out.getvalue()
