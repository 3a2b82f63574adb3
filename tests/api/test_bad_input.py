"""Bad input on every surface (library verbs, JSONL import, CLI, HTTP, MCP): an error that names the field
(and the import line), and nothing written: the same row count and the same version of every table."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from api_helpers import ALICE
from fastapi.testclient import TestClient
from mcp import Client
from typer.testing import CliRunner

from engram_pipeline.api.mcp_server import build_mcp
from engram_pipeline.cli import app
from engram_pipeline.importer import import_jsonl
from engram_pipeline.store import InvalidInput, MemoryStore

NAN = math.nan
BIG = 2**63 - 1
Y9999 = "9999-12-31T23:59:59-05:00"


@dataclass(frozen=True)
class Bad:
    surface: str  # lib | import | http | mcp | cli
    what: Any  # a call, an import line, an HTTP request, a tool call, CLI arguments
    needle: str  # the error names the field


def remember_kw(**kw: Any) -> Callable[[MemoryStore, str], Any]:
    return lambda store, _mid: store.remember("alice", kw.pop("content", "A new fact about ships"), **kw)


CASES = [
    # the library verbs
    Bad("lib", remember_kw(metadata={"x": NAN}), "metadata.x must be a finite number"),
    Bad("lib", remember_kw(metadata={"a": [1, math.inf]}), "metadata.a[1] must be a finite number"),
    Bad("lib", remember_kw(metadata={"n": 2**64}), "metadata.n is an integer out of range"),
    Bad("lib", lambda s, mid: s.update(mid, expected_version=1, metadata={"x": NAN}), "metadata.x"),
    Bad("lib", lambda s, mid: s.update(mid, expected_version=True, pinned=True), "expected_version must be an integer"),
    Bad("lib", lambda s, mid: s.update(mid, expected_version=1, pinned="yes"), "pinned must be true or false"),
    Bad("lib", remember_kw(memory_id="a/b"), "id must not contain '/'"),
    Bad("lib", remember_kw(memory_id="a\nb"), "id must not contain '/' or control characters"),
    Bad("lib", lambda s, _: s.remember("a\x00b", "fact"), "agent_id must not contain a NUL"),
    Bad("lib", lambda s, _: s.remember("a/b", "fact"), "agent_id must not contain '/'"),
    Bad("lib", remember_kw(created_at=datetime(9999, 12, 31, tzinfo=UTC), ttl_s=60), "created_at must be between"),
    Bad("lib", remember_kw(ttl_s=10**12), "ttl_s must be within"),
    Bad("lib", remember_kw(importance=True), "importance must be a number"),
    Bad("lib", remember_kw(vector=[0.0] * 384), "vector is all zeros"),
    Bad("lib", remember_kw(vector=[1e39] * 384), "vector contains NaN or infinite values"),
    Bad("lib", lambda s, _: s.recall("alice", "ships", k=True), "k must be an integer"),
    Bad("lib", lambda s, _: s.recall("alice", vector=[0.0] * 384), "vector is all zeros"),
    Bad("lib", lambda s, _: s.recall("alice", "ships", min_confidence=True), "min_confidence must be a number"),
    Bad("lib", lambda s, mid: s.restore(mid, expected_version=BIG), "expected_version must be within 1..2**53"),
    Bad("lib", lambda s, mid: s.delete(mid, expected_version=2**64), "expected_version must be within 1..2**53"),
    # import lines (the line number is named too)
    Bad("import", {"created_at": Y9999, "ttl_s": 60}, "line 1: created_at must be between"),
    Bad("import", {"created_at": "9999-12-31T23:59:59", "tier": "stm"}, "line 1: created_at must be between"),
    Bad("import", {"ttl_s": 10**12}, "line 1: ttl_s must be within"),
    Bad("import", {"version": BIG}, "line 1: version must be within 1..2**53"),
    Bad("import", {"access_count": 2**64}, "line 1: access_count must be within"),
    Bad("import", {"reinforcement_count": 2**64}, "line 1: reinforcement_count must be within"),
    Bad("import", {"agent_id": "a\x00b"}, "line 1: agent_id must not contain a NUL"),
    Bad("import", {"id": "a/b"}, "line 1: id must not contain '/'"),
    Bad("import", {"superseded_by": "x\x01"}, "line 1: superseded_by must not contain"),
    Bad("import", {"metadata": {"x": NAN}}, "line 1: metadata.x must be a finite number"),
    # HTTP bodies (raw JSON text: NaN is what Python's json writes for a float nan)
    Bad(
        "http", ("POST", "/v1/memories", '{"agent_id": "alice", "content": "c", "metadata": {"x": NaN}}'), "metadata.x"
    ),
    Bad("http", ("PATCH", "/v1/memories/{mid}", '{"expected_version": 1, "metadata": {"x": NaN}}'), "metadata.x"),
    Bad("http", ("POST", "/v1/memories", {"agent_id": "alice", "content": "c", "vector": [0.0] * 384}), "all zeros"),
    Bad("http", ("POST", "/v1/memories", {"agent_id": "alice", "content": "c", "ttl_s": 10**12}), "ttl_s"),
    Bad(
        "http",
        ("POST", "/v1/memories", {"agent_id": "alice", "content": "a\x00b"}),
        "content: Value error, text must not contain a NUL",
    ),
    Bad("http", ("POST", "/v1/memories/recall", {"agent_id": "alice", "query": "q", "k": True}), "k"),
    Bad("http", ("POST", "/v1/memories", {"agent_id": "alice/x", "content": "c"}), "agent_id"),
    Bad("http", ("POST", "/v1/memories/{mid}/restore", {"expected_version": BIG}), "expected_version"),
    # MCP tool arguments
    Bad("mcp", ("remember", {"content": "c", "importance": True}), "importance"),
    Bad("mcp", ("remember", {"content": "a\x00b"}), "content must not contain a NUL"),
    Bad("mcp", ("remember", {"content": "c", "metadata": {"x": "a\x00b"}}), "metadata.x must not contain a NUL"),
    Bad("mcp", ("recall", {"query": "q", "k": True}), "k"),
    Bad("mcp", ("update_memory", {"id": "{mid}", "expectedVersion": BIG, "pinned": True}), "expected_version"),
    Bad("mcp", ("restore_memory", {"id": "{mid}", "expectedVersion": BIG}), "expected_version"),
    # CLI options and files
    Bad("cli", ["remember", "alice", "c", "--id", "a/b"], "id must not contain '/'"),
    Bad("cli", ["remember", "alice", "c", "--metadata", '{"x": NaN}'], "metadata.x must be a finite number"),
    Bad("cli", ["remember", "alice", "c", "--ttl-s", str(10**12)], "ttl_s must be within"),
    Bad("cli", ["update", "{mid}", "--expected-version", "1", "--importance", "nan"], "importance must be within"),
    Bad("cli", ["restore", "{mid}", "--expected-version", str(BIG)], "expected_version must be within"),
    Bad("cli", ["import", {"version": BIG}], "line 1: version must be within"),
    Bad("cli", ["import", {"agent_id": "a\x00b"}], "line 1: agent_id must not contain a NUL"),
]


def footprint(store: MemoryStore) -> tuple[int, ...]:
    """Row count of memories and the version of every table a write could touch."""
    tables = (
        store.engine.memories,
        store.engine.audit.table,
        store.engine.links.table,
        store.engine.plans.table,
        store.engine.cursors.table,
    )
    return (store.engine.memories.count_rows(), *(t.version for t in tables))


def line(**fields: Any) -> dict[str, Any]:
    return {"agent_id": "alice", "content": "An imported fact about ships", **fields}


def attempt(bad: Bad, store: MemoryStore, client: TestClient, mid: str, tmp_path: Path) -> str:
    """Run one bad input on its surface and return the error text it got."""
    if bad.surface == "lib":
        with pytest.raises(InvalidInput) as err:
            bad.what(store, mid)
        return str(err.value)
    if bad.surface == "import":
        report = import_jsonl(store, [json.dumps(line(**bad.what))])
        assert report.created == 0 and report.failed_batches == 1
        return "; ".join(str(e) for e in report.errors)
    if bad.surface == "http":
        method, path, body = bad.what
        url = path.format(mid=mid)
        if isinstance(body, str):
            r = client.request(method, url, content=body, headers={**ALICE, "content-type": "application/json"})
        else:
            r = client.request(method, url, json=body, headers=ALICE)
        assert r.status_code == 422, r.text
        return str(r.json()["detail"])
    if bad.surface == "mcp":
        tool, args = bad.what
        args = {k: v.replace("{mid}", mid) if isinstance(v, str) else v for k, v in args.items()}

        async def call() -> Any:
            async with Client(build_mcp(store, "alice")) as c:
                return await c.call_tool(tool, args)

        result = anyio.run(call)
        assert result.is_error
        return " ".join(c.text for c in result.content)
    args = [a.replace("{mid}", mid) if isinstance(a, str) else a for a in bad.what]
    if args[0] == "import":
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps(line(**args[1])) + "\n", encoding="utf-8")
        args[1] = str(path)
    runner = CliRunner(env={"ENGRAM_EMBEDDER": "hashing", "ENGRAM_HOME": str(tmp_path)})
    result = runner.invoke(app, ["--db", store.uri, *args])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    return result.stderr


@pytest.mark.parametrize("bad", CASES, ids=[f"{c.surface}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_names_the_field_and_writes_nothing(
    bad: Bad, api_store: MemoryStore, client: TestClient, tmp_path: Path
) -> None:
    mid = api_store.remember("alice", "The deploy runs every night at two").memory["id"]
    before = footprint(api_store)
    text = attempt(bad, api_store, client, mid, tmp_path)
    assert bad.needle in text, text
    assert footprint(api_store) == before
    assert "NaN" not in (api_store.get(mid, track_access=False)["metadata"] or "")


def test_a_nul_in_an_id_to_look_up_is_invalid_input_on_every_surface(api_store: MemoryStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="NUL"):
        api_store.get("a\x00b")

    async def call() -> Any:
        async with Client(build_mcp(api_store, "alice")) as c:
            return [await c.call_tool(t, {"id": "a\x00b"}) for t in ("get_memory", "restore_memory")]

    for result in anyio.run(call):
        assert result.is_error and "INVALID_INPUT" in result.content[0].text
