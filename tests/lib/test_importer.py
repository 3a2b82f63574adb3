"""``import_jsonl`` / ``export_rows`` on a real store: validation, batching, dedup, store-managed fields."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from engram_pipeline.importer import export_rows, import_jsonl
from engram_pipeline.sample import generate_sample_corpus, load_sample_corpus, offset_lines, sample_path
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.write import bulk


def test_one_embed_call_and_one_commit_per_batch(store) -> None:  # type: ignore[no-untyped-def]
    calls: list[int] = []
    embed = store.embedder.embed
    store.embedder.embed = lambda texts: (calls.append(len(texts)), embed(texts))[1]  # count, not replace
    before = len(store.engine.memories.list_versions())
    # Unrelated contents: "memory number 3" / "memory number 13" would be flagged as contradicting (a commit more).
    lines = [{"agent_id": f"a{i % 3}", "content": f"{_word(i)} {_word(i + 9)} {_word(i + 17)}"} for i in range(25)]
    seen: list[int] = []
    report = import_jsonl(store, lines, batch_size=10, progress=seen.append)
    assert (report.lines, report.created, report.batches, report.errors) == (25, 25, 3, ())
    assert (report.semantic_duplicates, report.contradictions) == (0, 0)
    assert calls == [10, 10, 5] and seen == [10, 10, 5]
    assert len(store.engine.memories.list_versions()) - before == 3


def _word(i: int) -> str:
    return chr(97 + i % 26) * 6


def test_exact_duplicates_within_the_file_and_against_the_store(store) -> None:  # type: ignore[no-untyped-def]
    store.remember("a", "User lives in Berlin")
    lines = [
        {"agent_id": "a", "content": "user lives in   BERLIN"},  # same normalised content as the store's
        {"agent_id": "a", "content": "User likes tea"},
        {"agent_id": "a", "content": "User likes TEA"},  # same as the line before
        {"agent_id": "b", "content": "User likes tea"},  # another agent: not a duplicate
    ]
    report = import_jsonl(store, lines)
    assert (report.created, report.exact_duplicates) == (2, 2)
    assert len(store.list_memories("a")) == 2


def test_ids_are_kept_and_never_reused_for_other_content(store) -> None:  # type: ignore[no-untyped-def]
    assert import_jsonl(store, [{"id": "m1", "agent_id": "a", "content": "first"}]).created == 1
    report = import_jsonl(store, [{"id": "m1", "agent_id": "a", "content": "something else"}])
    assert report.errors and "already exists" in report.errors[0].reason and report.created == 0
    report = import_jsonl(
        store, [{"id": "m2", "agent_id": "a", "content": "x"}, {"id": "m2", "agent_id": "a", "content": "y"}]
    )
    assert report.errors[0].line == 2 and report.created == 0


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        ('{"agent_id": "a"}', "missing 'content'"),
        ('{"agent_id": "a", "content": "x", "colour": "red"}', "unknown field(s) colour"),
        ('{"agent_id": "a", "content": "x", "created_at": "yesterday"}', "ISO-8601"),
        ('{"agent_id": "a", "content": "x", "tags": "t"}', "tags must be a list"),
        ('{"agent_id": "a", "content": "x", "pinned": "yes"}', "pinned must be true or false"),
        ('{"agent_id": "a", "content": "x", "status": "gone"}', "status must be one of"),
        ('{"agent_id": "a", "content": "x", "access_count": -1}', "access_count must be within 0..2**53"),
        ('{"agent_id": "", "content": "x"}', "agent_id must be a non-empty string"),
    ],
)
def test_bad_lines_fail_their_batch(store, line: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    report = import_jsonl(store, ['{"agent_id": "a", "content": "fine"}', "", line])
    assert report.created == 0 and report.failed_batches == 1
    assert report.errors[0].line == 3 and reason in report.errors[0].reason
    assert store.agents() == []


def test_store_managed_fields_survive_export_and_import(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from engram_pipeline.store import MemoryStore

    a = store.remember("a", "User lives in Berlin", tier="ltm").memory
    b = store.remember("a", "User moved to Munich in May", tier="ltm").memory
    store.engine.cas_write(
        [{"id": a["id"], "version": 1, "status": "superseded", "superseded_by": b["id"]}],
        actor="test", action="supersede", audit=True,
    )  # fmt: skip
    exported = list(export_rows(store))
    other = MemoryStore.open(str(tmp_path / "other"), settings=store.settings)
    assert import_jsonl(other, [json.dumps(e) for e in exported]).created == 2
    moved = other.get(a["id"], track_access=False)
    assert moved["superseded_by"] == b["id"] and moved["status"] == "superseded" and moved["version"] == 2
    assert [h.memory["id"] for h in other.recall("a", "where does the user live", track_access=False)] == [b["id"]]
    assert list(export_rows(other)) == exported


def test_naive_times_are_utc(store) -> None:  # type: ignore[no-untyped-def]
    import_jsonl(store, [{"agent_id": "a", "content": "x", "created_at": "2026-03-01T12:00:00"}])
    assert store.list_memories("a")[0]["created_at"] == datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_sample_corpus_file_matches_its_generator() -> None:
    assert sample_path().read_text(encoding="utf-8").splitlines() == list(offset_lines())


def test_sample_corpus_imports_cleanly(store) -> None:  # type: ignore[no-untyped-def]
    now = datetime(2026, 6, 1, tzinfo=UTC)
    rows = load_sample_corpus(now)
    assert rows == generate_sample_corpus(now)
    # exact dedup only, as the demo loads it: the corpus holds near-duplicates for the merge pass to find
    report = import_jsonl(store, rows, checks="exact")
    assert report.errors == () and report.created == len(rows) and report.exact_duplicates == 0
    agents = store.agents()
    assert len(agents) == 4
    for agent in agents:
        mine = store.list_memories(agent)
        assert 30 <= len(mine) <= 80
        assert any(m["pinned"] for m in mine) and any(m["tier"] == "stm" for m in mine)
        assert {m["outcome"] for m in mine} >= {"success", "failure"}
    assert import_jsonl(store, load_sample_corpus()).created == 0  # idempotent at any "now"


# Rewordings, exact duplicates and contradictions, over two agents, in the order ``remember`` would see them.
CHECKED_LINES = [
    ("a", "User lives in Berlin", ["home"]),
    ("a", "User prefers dark mode in the editor", []),
    ("a", "The user lives in Berlin", ["profile"]),  # a rewording: folds into the first row
    ("a", "user lives in   BERLIN", []),  # an exact duplicate
    ("a", "I prefer dark mode in the editor", []),
    ("a", "User lives in Munich", []),  # contradicts Berlin (flagged, or supersedes it)
    ("a", "I reside in Berlin", []),  # Berlin again: a duplicate of it if visible, else contradicts Munich
    ("a", "User drinks green tea every morning", []),
    ("b", "User lives in Berlin", []),  # another agent: new
    ("b", "User works at Acme", []),
    ("b", "The user works at Acme", []),
    ("b", "User does not work at Acme", []),  # negation
    ("a", "Meeting with the design team is at 3pm", []),
    ("a", "Meeting with the design team is at 4pm", []),  # quantity
]


def _as_written(store) -> tuple[set[tuple], set[tuple]]:  # type: ignore[no-untyped-def]
    """Every row (hidden ones too) and link of the store, with ids replaced by contents (ids are random)."""
    rows = [r for agent in store.agents() for r in store.engine.scan(agent).to_pylist()]
    content = {r["id"]: (r["agent_id"], r["content"]) for r in rows}
    out = set()
    for r in rows:
        meta = json.loads(r["metadata"] or "{}")
        out.add((
            content[r["id"]], r["status"], r["reinforcement_count"], tuple(r["tags"] or ()),
            round(r["confidence"], 6), round(r["importance"], 3),
            tuple(sorted(content[i] for i in r["contradiction_with"] or ())),
            content.get(r["superseded_by"]),
            tuple(sorted(m["content"] for m in meta.get("duplicate_matches", []))),
            tuple(sorted((content[c["with"]], c["reason"]) for c in meta.get("contradictions", []))),
        ))  # fmt: skip
    links = {
        (content[k["src_id"]], content[k["dst_id"]], k["rel"])
        for agent in store.agents()
        for k in store.engine.links_for_agent(agent).to_pylist()
    }
    return out, links


@pytest.mark.parametrize("policy", ["flag", "supersede"])
@pytest.mark.parametrize("batch_size", [3, 1000])
def test_import_gives_what_remembering_the_lines_one_by_one_gives(tmp_path, policy, batch_size) -> None:  # type: ignore[no-untyped-def]
    from engram_pipeline.settings import Settings
    from engram_pipeline.store import MemoryStore

    settings = Settings.from_env({"ENGRAM_EMBEDDER": "hashing"}).replace(contradiction_policy=policy)
    one_by_one = MemoryStore.open(str(tmp_path / "remembered"), settings=settings)
    imported = MemoryStore.open(str(tmp_path / "imported"), settings=settings)
    for store in (one_by_one, imported):  # what both stores held before: the checks run against it too
        store.remember("a", "User prefers tea", tags=["drinks"])
    outcomes = [one_by_one.remember(a, c, tags=t).outcome for a, c, t in CHECKED_LINES]
    lines = [{"agent_id": a, "content": c, "tags": t} for a, c, t in CHECKED_LINES]
    report = import_jsonl(imported, lines, batch_size=batch_size)
    assert _as_written(imported) == _as_written(one_by_one)
    assert (report.created, report.exact_duplicates, report.semantic_duplicates) == (
        outcomes.count("created"), outcomes.count("exact_duplicate"), outcomes.count("semantic_duplicate")
    )  # fmt: skip
    assert report.contradictions == len(_as_written(one_by_one)[1]) >= 3


def test_checks_exact_leaves_near_duplicates_and_contradictions_to_the_passes(store) -> None:  # type: ignore[no-untyped-def]
    lines = [{"agent_id": "a", "content": c} for _, c, _ in CHECKED_LINES[:7]]
    report = import_jsonl(store, lines, checks="exact")
    assert (report.created, report.exact_duplicates, report.semantic_duplicates, report.contradictions) == (6, 1, 0, 0)
    assert {r["status"] for r in store.list_memories("a")} == {"active"}


def test_a_bad_line_writes_nothing_of_its_checked_batch(store) -> None:  # type: ignore[no-untyped-def]
    store.remember("a", "User lives in Berlin")
    before = store.engine.memories_version()
    lines = [json.dumps({"agent_id": a, "content": c}) for a, c, _ in CHECKED_LINES] + ["not json"]
    report = import_jsonl(store, lines)
    assert report.failed_batches == 1 and report.created == 0 and report.errors[0].line == len(CHECKED_LINES) + 1
    assert store.engine.memories_version() == before and len(store.list_memories("a")) == 1
    assert store.engine.links_for_agent("a").num_rows == 0


@pytest.mark.parametrize("when", ["before its read", "before its fold"])
def test_a_line_whose_fold_target_is_deleted_mid_import_is_written(store, monkeypatch, when) -> None:  # type: ignore[no-untyped-def]
    """Issue 35, for imports: the line was neither folded nor written (or the whole batch failed)."""
    there = MemoryStore.open(store.uri, settings=store.settings)  # another process's handle, which deletes
    stored = store.remember("a", "The deploy runs every night at two").memory
    deleted: list[str] = []

    def delete_once() -> None:
        if not deleted:
            there.delete(stored["id"])
            deleted.append(stored["id"])

    if when == "before its read":
        real_read = bulk.rows_by_id

        def rows_by_id(*args, **kwargs):  # type: ignore[no-untyped-def]
            delete_once()
            return real_read(*args, **kwargs)

        monkeypatch.setattr(bulk, "rows_by_id", rows_by_id)
    else:
        real_cas = store.engine.cas_write

        def cas_write(*args, **kwargs):  # type: ignore[no-untyped-def]
            if kwargs.get("action") == "dedup":
                delete_once()
            return real_cas(*args, **kwargs)

        monkeypatch.setattr(store.engine, "cas_write", cas_write)
    lines = [{"agent_id": "a", "content": "The VPN profile expires in June"}]
    lines.append({"agent_id": "a", "content": "The deploy runs every night at 2"})  # folds into the stored row
    report = import_jsonl(store, lines)
    assert deleted == [stored["id"]]
    assert (report.created, report.semantic_duplicates, report.exact_duplicates) == (2, 0, 0)
    assert sorted(r["content"] for r in store.list_memories("a")) == [
        "The VPN profile expires in June",
        "The deploy runs every night at 2",
    ]
