"""The pass registry says what the passes do: each entry's report is what its functions return, and the names
it records for stored data (cursors, audit actors) are the ones a run of the whole pipeline writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engram_pipeline.importer import import_jsonl
from engram_pipeline.lifecycle.corpus_merge import ACTOR as APPLY_ACTOR
from engram_pipeline.lifecycle.corpus_merge import APPLY_PASS
from engram_pipeline.lifecycle.passes import PASSES
from engram_pipeline.lifecycle.sweep import COLUMNAR, SWEEPS
from engram_pipeline.model import utcnow
from engram_pipeline.sample import load_sample_corpus
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.cursors import LEASE_PREFIX


def test_each_pass_returns_the_report_the_registry_names() -> None:
    for name, p in PASSES.items():
        assert p.name == name
        # annotations as written (the store type they name is imported for type checking only)
        assert p.run.__annotations__["return"] == p.report.__name__, name
        assert p.sweep.__annotations__["return"] == f"dict[str, {p.report.__name__}]", name
    assert {n: p.run for n, p in PASSES.items()} == SWEEPS and {n: p.sweep for n, p in PASSES.items()} == COLUMNAR


def _table(store: MemoryStore, name: str, column: str) -> set[Any]:
    return {v for shard in store.engine.shards for v in getattr(shard, name).table.to_arrow()[column].to_pylist()}


def test_the_stored_names_are_those_the_passes_write(store: MemoryStore) -> None:
    now = utcnow()
    import_jsonl(store, load_sample_corpus(now=now - timedelta(days=120)))
    for agent in store.agents():
        for p in PASSES.values():
            p.run(store, agent, now=now)
    cursors = {c for c in _table(store, "cursors", "pass_name") if not c.startswith(LEASE_PREFIX)}
    actors = _table(store, "audit", "actor")
    assert cursors and actors, "the run wrote cursors and audit events (the check can fail)"
    assert cursors <= {p.cursor for p in PASSES.values()} | {APPLY_PASS}, cursors
    assert actors <= {a for p in PASSES.values() for a in p.actors} | {APPLY_ACTOR}, actors
    # the passes that changed the sample wrote their cursors under the registry's names
    assert {"stm_promotion", "ltm_decay", "consolidate"} <= cursors
