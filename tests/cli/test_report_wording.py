"""A dry run reports what it would do: ``would_merge``, never ``merged``, for a corpus-merge plan."""

from __future__ import annotations

from tests.cli.conftest import parse


def test_corpus_merge_dry_run_says_would_merge(cli) -> None:  # type: ignore[no-untyped-def]
    for text in ("Deploys happen on friday", "Deploys usually happen on friday", "User prefers tea"):
        assert cli("remember", "alice", text).exit_code == 0
    report = parse(cli("consolidate-corpus", "--agent", "alice", json_=True))[0]["report"]
    assert report["dry_run"] is True and "would_merge" in report and "merged" not in report
    table = cli("consolidate-corpus", "--agent", "alice")
    assert "would_merge" in table.stdout and "merged " not in table.stdout
