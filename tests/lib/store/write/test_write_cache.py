"""The write cache (``store/write/cache.py``): the write path's checks read an in-memory view of each agent's
rows, and decide exactly as the table reads would, whoever else writes to the table meanwhile."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.write import cache as write_cache
from engram_pipeline.store.write import fragments as write_fragments
from engram_pipeline.store.write import reads as write_reads
from engram_pipeline.store.write.cache import WriteCache
from engram_pipeline.store.write.view import AgentView
from tests.stores import pre_row_versions
from tests.vectors import DIM, THRESHOLDS, at_cosine, unit


def two_stores(
    tmp_path: Path, settings: Settings, *, row_versions: bool = True, **env: int
) -> tuple[MemoryStore, MemoryStore]:
    """Two stores on one directory, each with its own cache: what two processes see. ``row_versions=False``:
    a store whose ``memories`` was made before it had stable row ids, so the views are brought up to date
    by reading their agents' ``(id, version)``."""
    s = settings.replace(**THRESHOLDS, **env)
    uri = str(tmp_path / "store")
    if not row_versions:
        pre_row_versions(uri, DIM)
    here, there = MemoryStore.open(uri, settings=s), MemoryStore.open(uri, settings=s)
    assert here.engine.shards[0].tracks_versions is row_versions
    return here, there


@pytest.fixture(params=[True, False], ids=["row-versions", "no-row-versions"])
def row_versions(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture(
    autouse=True,
    params=[(True, 2.0), (False, 0.0), (False, 2.0)],
    ids=["changed-fragments", "versions-only", "agents-and-versions"],
)
def catch_up_query(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test with each shape of the catch-up's query: over the fragments changed since (the default),
    and over the whole table, on the rows' versions alone (the agents hold most of the table) or on the
    agents' filter too."""
    fragments, broad = request.param
    monkeypatch.setattr(write_cache, "FRAGMENTS", fragments)
    monkeypatch.setattr(write_cache, "BROAD", broad)


def caught_up_without_rereading(store: MemoryStore, row_versions: bool) -> None:
    """With row versions, every view was brought up to date from the rows that changed; without, by rereads."""
    cache = store.engine.write_cache
    assert cache.refreshes >= 1
    assert (cache.rereads == 0) if row_versions else (cache.rereads == cache.refreshes)


def test_a_write_from_elsewhere_is_seen_by_the_next_check(
    tmp_path: Path, settings: Settings, row_versions: bool
) -> None:
    here, there = two_stores(tmp_path, settings, row_versions=row_versions)
    base = unit(np.random.default_rng(0).normal(size=DIM))
    here.remember("a", "the first fact", vector=[float(x) for x in unit(np.random.default_rng(9).normal(size=DIM))])
    assert here.engine.write_cache.agents == 1  # the agent's view is held
    made = there.remember("a", "written by the other process", vector=[float(x) for x in base])
    assert made.outcome == "created"
    there.remember("b", "another agent's row, which the catch-up of a's view leaves out", vector=at_cosine(base, 0.99))
    assert here.remember("a", "Written by the other  process").outcome == "exact_duplicate"
    near = here.remember("a", "nearly what the other process wrote", vector=at_cosine(base, 0.99))
    assert near.outcome == "semantic_duplicate"
    assert near.memory["id"] == made.memory["id"]
    caught_up_without_rereading(here, row_versions)


def test_a_row_hidden_elsewhere_stops_being_a_neighbour(tmp_path: Path, settings: Settings, row_versions: bool) -> None:
    here, there = two_stores(tmp_path, settings, row_versions=row_versions)
    base = unit(np.random.default_rng(1).normal(size=DIM))
    old = here.remember("a", "a fact that will be archived", vector=[float(x) for x in base]).memory
    there.engine.cas_write(
        [{"id": old["id"], "version": old["version"], "status": "archived"}], actor="test", action="test"
    )
    near = here.remember("a", "a fact close to the archived one", vector=at_cosine(base, 0.99))
    assert near.outcome == "created"  # an archived row is not recalled, so nothing collapses into it
    # the exact check covers hidden rows, as the table's lookup on content_hash does
    assert here.remember("a", "a fact that will be archived").outcome == "exact_duplicate"
    caught_up_without_rereading(here, row_versions)


def test_an_edit_elsewhere_is_what_the_checks_see(tmp_path: Path, settings: Settings, row_versions: bool) -> None:
    here, there = two_stores(tmp_path, settings, row_versions=row_versions)
    row = here.remember("a", "the meeting is in room four").memory
    there.update(row["id"], expected_version=row["version"], content="lunch is at noon on fridays")
    assert here.remember("a", "the meeting is in room four").outcome == "created"
    assert here.remember("a", "Lunch is at noon on Fridays").outcome == "exact_duplicate"
    caught_up_without_rereading(here, row_versions)


def test_an_exact_duplicate_of_a_row_written_here_is_the_row_as_stored_without_a_read(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The views keep the rows this process appended lately whole, as a read returns them: an exact duplicate
    of one is told that row without reading it, and once the row changes anywhere (an edit, the access fold,
    which leaves its version alone) it is read again."""
    here, there = two_stores(tmp_path, settings)
    reads: list[int] = []
    whole_rows = write_reads._whole_rows
    monkeypatch.setattr(write_reads, "_whole_rows", lambda *a, **k: reads.append(1) or whole_rows(*a, **k))
    made = here.remember("a", "the deploy key rotates monthly", tags=["ops"]).memory
    again = here.remember("a", "The deploy key  rotates monthly")
    assert again.outcome == "exact_duplicate" and not reads
    assert again.memory == here.get(made["id"], track_access=False)

    there.get(made["id"])  # a read logged, then folded onto the row (access_count, last_accessed_at)
    there.engine.fold_access()
    folded = here.remember("a", "the deploy key rotates monthly")
    assert folded.memory["access_count"] == 1 and folded.memory["version"] == made["version"] and reads
    assert folded.memory == here.get(made["id"], track_access=False)

    edited = there.update(made["id"], expected_version=made["version"], tags=["ops", "keys"])
    assert here.remember("a", "the deploy key rotates monthly").memory == edited


def test_a_row_deleted_elsewhere_is_gone_from_the_view(tmp_path: Path, settings: Settings) -> None:
    """A deletion leaves no changed row to read: the agent's row count, below what the view holds, sends
    the view to the whole ``(id, version)`` read."""
    here, there = two_stores(tmp_path, settings)
    gone = here.remember("a", "a fact that will be deleted").memory
    kept = here.remember("a", "a fact that stays").memory
    there.delete(gone["id"], expected_version=gone["version"], actor="test")
    assert here.remember("a", "a fact that will be deleted").outcome == "created"
    assert here.remember("a", "a fact that stays").memory["id"] == kept["id"]
    assert here.engine.write_cache.rereads == 1


def test_a_compaction_elsewhere_reads_no_row_again(tmp_path: Path, settings: Settings) -> None:
    """Compaction and index commits move the table's version but change no row: the views catch up by
    reading nothing but the count, and still decide as before."""
    here, there = two_stores(tmp_path, settings)
    base = unit(np.random.default_rng(5).normal(size=DIM))
    first = here.remember("a", "the fact before compaction", vector=[float(x) for x in base]).memory
    for i in range(3):
        here.remember("a", f"another fact {i}")
    version = there.engine.memories.version
    there.maintain()
    assert there.engine.memories.version > version
    (view,) = here.engine.write_cache.views(here.engine, 0, here.engine.memories.version, ["a"]).values()
    assert view.at == here.engine.memories.version and view.live == 4
    near = here.remember("a", "nearly the fact before compaction", vector=at_cosine(base, 0.99))
    assert near.outcome == "semantic_duplicate" and near.memory["id"] == first["id"]
    assert here.engine.write_cache.refreshes >= 1 and here.engine.write_cache.rereads == 0


def test_the_fragments_changed_since_a_version_hold_every_row_written_since(tmp_path: Path, settings: Settings) -> None:
    """The catch-up reads only the fragments changed since the views' version: after an append, an edit and a
    compaction elsewhere, those fragments hold every row created or changed since, and a fragment nobody
    touched is left out."""
    here, there = two_stores(tmp_path, settings)
    old = [here.remember("a", text).memory for text in ("the cat sleeps", "rain in april", "trains run late")]
    here.engine.memories.to_lance().optimize.compact_files()  # one fragment of old rows
    here.remember("a", "a fact nobody touches")  # a fragment of its own
    start = here.engine.memories.version
    changed = write_fragments.ChangedFragments()
    changed.seen(here.engine.memories, start)
    unchanged = changed.since(here.engine.memories, start, start)
    assert unchanged is not None and unchanged[1] == []
    there.remember("b", "a new fact of another agent")
    there.update(old[0]["id"], expected_version=old[0]["version"], content="an edited fact")
    found = changed.since(here.engine.memories, start, here.engine.memories.version)
    assert found is not None
    dataset, fragments = found
    recent = f"_row_created_at_version > {start} OR _row_last_updated_at_version > {start}"
    everywhere = dataset.to_table(columns=["id"], filter=recent).column("id").to_pylist()
    assert sorted(
        dataset.scanner(columns=["id"], filter=recent, fragments=fragments).to_table().column("id").to_pylist()
    ) == sorted(everywhere)
    assert len(everywhere) == 2 and len(fragments) < len(dataset.get_fragments())
    there.engine.memories.to_lance().optimize.compact_files()  # moves rows, changes none
    dataset, fragments = changed.since(here.engine.memories, start, here.engine.memories.version) or (None, [])
    assert sorted(
        dataset.scanner(columns=["id"], filter=recent, fragments=fragments).to_table().column("id").to_pylist()
    ) == sorted(everywhere)
    assert (
        changed.since(here.engine.memories, start - 1, here.engine.memories.version) is None
    )  # nothing kept from before


def test_the_views_find_what_an_exact_search_of_the_table_finds(tmp_path: Path, settings: Settings) -> None:
    store, _ = two_stores(tmp_path, settings)
    rng = np.random.default_rng(3)
    centre = unit(rng.normal(size=DIM))
    vectors = [at_cosine(centre, c, seed=i) for i, c in enumerate(rng.uniform(0.3, 0.95, size=200))]
    rows = [store.engine.new_row("a", f"row number {i}") | {"vector": v} for i, v in enumerate(vectors)]
    store.engine.insert_rows(rows)
    store.engine.cas_write([{"id": rows[0]["id"], "version": 1, "status": "superseded"}], actor="test", action="test")
    queries = [at_cosine(centre, 0.9, seed=1000 + i) for i in range(5)]
    # the table, unindexed: an exact flat search
    searched = write_reads.many_visible_neighbours(store.engine, "a", queries)
    (view,) = store.engine.write_cache.views(store.engine, 0, store.engine.shards[0].memories.version, ["a"]).values()
    for mine, theirs in zip(view.nearest(queries, write_reads.NEIGHBOURS), searched, strict=True):
        assert [h["id"] for h in mine] == [h["id"] for h in theirs]
        assert np.allclose([h["_similarity"] for h in mine], [h["_similarity"] for h in theirs], atol=1e-5)
        assert rows[0]["id"] not in {h["id"] for h in mine}


def test_an_agent_beyond_the_budget_is_read_from_the_table(tmp_path: Path, settings: Settings) -> None:
    store, _ = two_stores(tmp_path, settings, write_cache_rows=10)
    base = unit(np.random.default_rng(4).normal(size=DIM))
    first = store.remember("big", "the first of many", vector=[float(x) for x in base]).memory
    store.engine.insert_rows(
        [store.engine.new_row("big", f"filler {i}") | {"vector": at_cosine(base, 0.2, i)} for i in range(8)]
    )
    assert store.remember("big", "filler 1").outcome == "exact_duplicate"  # 9 rows: more than half of 10
    assert store.engine.write_cache.agents == 0
    near = store.remember("big", "nearly the first of many", vector=at_cosine(base, 0.99))
    assert (near.outcome, near.memory["id"]) == ("semantic_duplicate", first["id"])
    small = [store.remember(f"small-{i}", f"fact {i}").memory for i in range(4)]
    assert store.engine.write_cache.rows <= 10
    assert all(store.remember(m["agent_id"], m["content"]).outcome == "exact_duplicate" for m in small)


def test_with_the_cache_off_the_checks_read_the_table(tmp_path: Path, settings: Settings) -> None:
    store, _ = two_stores(tmp_path, settings, write_cache_rows=0)
    assert store.remember("a", "one fact").outcome == "created"
    assert store.remember("a", "One  fact").outcome == "exact_duplicate"
    assert store.engine.write_cache.agents == 0


def test_a_view_replaces_a_row_it_holds_and_packs_its_dead_slots() -> None:
    view = AgentView("a", 4, at=1)
    rows = [{"id": f"m{i}", "content_hash": f"h{i}", "version": 1, "status": "active"} for i in range(100)]
    vectors = np.eye(4, dtype=np.float32)[np.arange(100) % 4]
    view.add(rows, vectors)
    for _ in range(3):  # every row moved three times: the dead slots are packed away
        view.add([{**r, "version": r["version"] + 1} for r in rows], vectors)
        rows = [{**r, "version": r["version"] + 1} for r in rows]
    assert view.live == 100 and view.n <= 200
    assert view.versions() == {r["id"]: 4 for r in rows}
    assert view.ids_with_hash("h7") == ["m7"]
    (hits,) = view.nearest([[0.0, 0.0, 1.0, 0.0]], 3)
    assert [h["_similarity"] for h in hits] == pytest.approx([1.0, 1.0, 1.0])
    assert {int(h["id"][1:]) % 4 for h in hits} == {2}


def test_appends_keep_only_the_views_at_the_version_they_follow() -> None:
    cache = WriteCache(max_rows=100)
    fresh, behind = AgentView("a", 2, at=5), AgentView("b", 2, at=3)
    cache._views[0] = OrderedDict(a=fresh, b=behind)
    row = {"id": "n", "agent_id": "a", "content_hash": "h", "version": 1, "status": "active", "vector": [1.0, 0]}
    cache.appended(0, 5, 6, [row])
    assert (fresh.at, fresh.live, behind.at) == (6, 1, 3)
    cache.appended(0, 6, 8, [{**row, "id": "m"}])  # the caller vouches that version 7 changed no row
    assert (fresh.at, fresh.live, behind.at) == (8, 2, 3)
