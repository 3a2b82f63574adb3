"""A pass with nothing to do commits nothing: no cursor, lease, audit, plan or table version of any table."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import lancedb
import pytest

from engram_pipeline.invariants import versions_never_go_backwards
from engram_pipeline.lifecycle import (
    archive_faded,
    consolidate,
    consolidate_corpus,
    decay_confidence,
    decay_importance,
    detect_contradictions,
    promote_stm,
)
from engram_pipeline.lifecycle.episodes import cluster_episodes, record_watermark
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.errors import StoreNotFound

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


PASSES: dict[str, Callable[[MemoryStore, str], Any]] = {
    "promotion": lambda store, agent: promote_stm(store, agent, now=NOW),
    "importance decay": lambda store, agent: decay_importance(store, agent, now=NOW),
    "confidence decay": lambda store, agent: decay_confidence(store, agent, now=NOW),
    "contradictions": lambda store, agent: detect_contradictions(store, agent, now=NOW),
    "corpus merge plan": lambda store, agent: consolidate_corpus(store, agent, dry_run=True, now=NOW),
    "corpus merge apply": lambda store, agent: consolidate_corpus(store, agent, dry_run=False, now=NOW),
    "archival": lambda store, agent: archive_faded(store, agent, now=NOW),
    "consolidation": lambda store, agent: consolidate(store, agent, now=NOW),
}


def _commits(store: MemoryStore, run: Callable[[], Any]) -> dict[str, int]:
    before = store.engine.table_versions()
    run()
    after = store.engine.table_versions()
    return {name: after[name] - before[name] for name in before if after[name] != before[name]}


@pytest.mark.parametrize("name", list(PASSES))
def test_a_second_run_on_an_idle_agent_commits_nothing(store: MemoryStore, name: str) -> None:
    for text in ("User lives in Berlin", "User prefers green tea", "Deploys go out on Fridays"):
        store.remember("a", text)
    for run in PASSES.values():
        run(store, "a")
    assert _commits(store, lambda: PASSES[name](store, "a")) == {}


@pytest.mark.parametrize("name", list(PASSES))
def test_an_agent_with_no_due_work_commits_nothing(store: MemoryStore, name: str) -> None:
    store.remember("other", "User lives in Berlin")
    assert _commits(store, lambda: PASSES[name](store, "a")) == {}
    assert store.engine.latest_plan("a", status="pending") is None  # a dry run with zero clusters stores no plan


def test_the_checks_and_the_watermark_of_an_idle_agent_commit_nothing(store: MemoryStore) -> None:
    store.remember("a", "User lives in Berlin")
    versions_never_go_backwards(store, "a")
    clusters = cluster_episodes(store, "a", now=NOW)
    assert clusters.episodes_scanned == 0
    assert _commits(store, lambda: versions_never_go_backwards(store, "a")) == {}
    assert _commits(store, lambda: record_watermark(store, "a", clusters)) == {}


def test_opening_a_store_opens_its_tables_by_name_without_listing(
    store_uri: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("MemoryStore.open listed the database's tables")

    monkeypatch.setattr(lancedb.db.LanceDBConnection, "list_tables", refuse)
    monkeypatch.setattr(lancedb.db.LanceDBConnection, "table_names", refuse)
    created = MemoryStore.open(store_uri, settings=settings)  # creates every table
    created.remember("a", "User lives in Berlin")
    again = MemoryStore.open(store_uri, settings=settings, create=False)
    assert again.count("a") == 1 and set(again.engine.tables()) == set(created.engine.tables())
    with pytest.raises(StoreNotFound):
        MemoryStore.open(f"{store_uri}-missing", settings=settings, create=False)


def test_maintenance_of_an_idle_store_commits_nothing(store: MemoryStore) -> None:
    store.remember("a", "User lives in Berlin")
    for run in PASSES.values():
        run(store, "a")
    store.maintain()  # compacts what the passes wrote
    assert _commits(store, store.maintain) == {}
