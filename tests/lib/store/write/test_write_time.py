"""Write-time checks of ``remember``: exact dedup, semantic dedup, contradictions under both policies.

Similarities are controlled exactly with hand-made vectors (``remember(..., vector=...)``) and explicitly set
thresholds, so the tests do not depend on what the hashing embedder makes of the sentences.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engram_pipeline.model import loads_metadata
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.vectors import DIM, THRESHOLDS, at_cosine, unit


def open_store(tmp_path: Path, settings: Settings, **changes: object) -> MemoryStore:
    return MemoryStore.open(str(tmp_path / "store"), settings=settings.replace(**{**THRESHOLDS, **changes}))


@pytest.fixture
def base() -> np.ndarray:
    return unit(np.random.default_rng(0).normal(size=DIM))


def test_exact_duplicate_returns_existing_row_untouched(tmp_path: Path, settings: Settings) -> None:
    store = open_store(tmp_path, settings)
    first = store.remember("a", "The deploy key rotates monthly").memory
    again = store.remember("a", "the DEPLOY key rotates   monthly", tags=["ops"])
    assert again.outcome == "exact_duplicate"
    assert again.memory == first
    assert store.get(first["id"], track_access=False) == first
    assert len(store.list_memories("a")) == 1


def test_near_duplicate_collapses_into_existing_row(tmp_path: Path, settings: Settings, base: np.ndarray) -> None:
    store = open_store(tmp_path, settings)
    first = store.remember("a", "Deploys run every night at two", vector=base.tolist(), tags=["ops"]).memory
    result = store.remember("a", "Every night at two the deploy runs", vector=at_cosine(base, 0.98), tags=["ci"])
    assert result.outcome == "semantic_duplicate"
    assert result.score == pytest.approx(0.98, abs=1e-4)
    rows = store.list_memories("a")
    assert [r["id"] for r in rows] == [first["id"]]  # no new row
    row = rows[0]
    (match,) = loads_metadata(row)["duplicate_matches"]
    assert match["score"] == pytest.approx(0.98, abs=1e-4)
    assert match["match_id"] and match["match_id"] != first["id"] and match["at"]
    assert row["reinforcement_count"] == 1 and row["version"] == first["version"] + 1
    assert row["importance_factors"] is not None  # re-scored
    assert row["content"] == first["content"] and row["tags"] == ["ci", "ops"]
    assert result.memory["id"] == first["id"]


def test_similarity_just_below_duplicate_threshold_creates_a_row(
    tmp_path: Path, settings: Settings, base: np.ndarray
) -> None:
    store = open_store(tmp_path, settings)
    store.remember("a", "Deploys run every night at two", vector=base.tolist())
    result = store.remember("a", "The nightly deploy starts at two", vector=at_cosine(base, 0.96))
    assert result.outcome == "created" and result.contradictions == ()
    assert len(store.list_memories("a")) == 2


def test_duplicate_threshold_from_settings_controls_collapse(
    tmp_path: Path, settings: Settings, base: np.ndarray
) -> None:
    store = open_store(tmp_path, settings, duplicate_threshold=0.95, contradiction_threshold_max=0.95)
    store.remember("a", "Deploys run every night at two", vector=base.tolist())
    assert store.remember("a", "Nightly deploys run at two", vector=at_cosine(base, 0.96)).outcome == (
        "semantic_duplicate"
    )


def test_contradiction_is_flagged_at_write_time(tmp_path: Path, settings: Settings, base: np.ndarray) -> None:
    store = open_store(tmp_path, settings)
    old = store.remember("a", "User lives in Berlin", vector=base.tolist()).memory
    result = store.remember("a", "User lives in Munich", vector=at_cosine(base, 0.9))
    assert result.outcome == "created"
    (info,) = result.contradictions
    assert info["memory_id"] == old["id"] and info["rule"] == "value_swap" and info["policy"] == "flag"
    new_id = result.memory["id"]
    a, b = store.get(old["id"], track_access=False), store.get(new_id, track_access=False)
    assert a["status"] == b["status"] == "contradicted"
    assert a["contradiction_with"] == [new_id] and b["contradiction_with"] == [old["id"]]
    for row, partner in ((a, new_id), (b, old["id"])):
        (entry,) = loads_metadata(row)["contradictions"]
        assert entry["with"] == partner and "berlin" in entry["reason"] and entry["at"]
    (link,) = store.engine.links_of([old["id"]], rel="contradicts")
    assert (link["src_id"], link["dst_id"]) == (new_id, old["id"])
    # both stay in recall
    assert {h.memory["id"] for h in store.recall("a", vector=base.tolist(), k=5)} == {old["id"], new_id}


def test_contradiction_supersedes_the_older_row_under_policy_supersede(
    tmp_path: Path, settings: Settings, base: np.ndarray
) -> None:
    store = open_store(tmp_path, settings, contradiction_policy="supersede")
    old = store.remember("a", "User lives in Berlin", vector=base.tolist()).memory
    new = store.remember("a", "User lives in Munich", vector=at_cosine(base, 0.9)).memory
    hidden = store.get(old["id"], track_access=False)
    assert hidden["status"] == "superseded" and hidden["superseded_by"] == new["id"]
    assert loads_metadata(hidden)["superseded"]["by"] == new["id"]
    assert store.get(new["id"], track_access=False)["status"] == "active"
    assert [h.memory["id"] for h in store.recall("a", vector=base.tolist(), k=5)] == [new["id"]]
    (link,) = store.engine.links_of([old["id"]], rel="supersedes")
    assert (link["src_id"], link["dst_id"]) == (new["id"], old["id"])
    restored = store.restore(old["id"])
    assert {k: v for k, v in restored.items() if k not in ("version", "updated_at", "write_token")} == {
        k: v for k, v in old.items() if k not in ("version", "updated_at", "write_token")
    }


def test_contradiction_above_duplicate_threshold_is_flagged_not_collapsed(
    tmp_path: Path, settings: Settings, base: np.ndarray
) -> None:
    """An embedder may score two contradicting sentences as near-duplicates: they must not collapse, and the
    contradiction must still be recorded."""
    store = open_store(tmp_path, settings)
    old = store.remember("a", "User lives in Berlin", vector=base.tolist()).memory
    result = store.remember("a", "User lives in Munich", vector=at_cosine(base, 0.99))
    assert result.outcome == "created"
    assert [c["memory_id"] for c in result.contradictions] == [old["id"]]
    assert store.get(old["id"], track_access=False)["status"] == "contradicted"


def test_negated_near_duplicate_is_not_collapsed(tmp_path: Path, settings: Settings, base: np.ndarray) -> None:
    store = open_store(tmp_path, settings)
    store.remember("a", "A man is playing a guitar", vector=base.tolist())
    result = store.remember("a", "A man is not playing a guitar", vector=at_cosine(base, 0.99))
    assert result.outcome == "created"
    assert len(store.list_memories("a")) == 2


def test_different_number_near_duplicate_is_not_collapsed(tmp_path: Path, settings: Settings, base: np.ndarray) -> None:
    store = open_store(tmp_path, settings)
    store.remember("a", "The flight leaves from gate 12", vector=base.tolist())
    result = store.remember("a", "The flight leaves from gate 21", vector=at_cosine(base, 0.99))
    assert result.outcome == "created"


def test_a_rewording_collapses_by_the_merge_judge_but_episodes_keep_the_duplicate_threshold(
    tmp_path: Path, settings: Settings
) -> None:
    store = MemoryStore.open(str(tmp_path / "store"), settings=settings)  # the hashing profile and judge
    first = store.remember("a", "User lives in Berlin.").memory
    again = store.remember("a", "I reside in Berlin")
    assert again.outcome == "semantic_duplicate" and again.memory["id"] == first["id"]
    (match,) = loads_metadata(again.memory)["duplicate_matches"]
    assert match["content"] == "I reside in Berlin"
    assert store.remember("a", "User lives in Munich.").outcome == "created", "a value swap is never folded"
    # Two similar episodes are two occurrences: only the duplicate threshold folds them, as before.
    store.remember("b", "User lives in Berlin.", kind="episodic")
    assert store.remember("b", "I reside in Berlin", kind="episodic").outcome == "created"
