"""The MCP server as a real stdio subprocess, driven by the SDK's client."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from api_helpers import HeldLoad
from mcp import Client, StdioServerParameters

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore

TOOLS = {
    "remember",
    "recall",
    "get_memory",
    "update_memory",
    "delete_memory",
    "restore_memory",
    "promote_memories",
    "consolidate_corpus",
    "get_health",
    "discard_merge_plan",
}
READ_ONLY = {"recall", "get_memory", "get_health"}
DESTRUCTIVE = {"update_memory", "delete_memory", "restore_memory", "consolidate_corpus", "discard_merge_plan"}


def payload(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content.get("result", result.structured_content)
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error
    return " ".join(c.text for c in result.content)


@pytest.mark.integration
def test_mcp_tools_over_stdio(store_uri: str, settings: Settings, tmp_path: Path) -> None:
    other = MemoryStore.open(store_uri, settings=settings)
    bob_id = other.remember("bob", "Bob's private note").memory["id"]
    env = {
        **os.environ,
        "ENGRAM_EMBEDDER": "hashing",
        "ENGRAM_DB_URI": store_uri,
        "ENGRAM_HOME": str(tmp_path / "home"),
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "engram_pipeline.api", "--mcp-agent", "alice"], env=env, cwd=str(tmp_path)
    )

    async def session() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == TOOLS
            schema = {t.name: t.input_schema for t in tools.tools}
            assert "expectedVersion" in schema["update_memory"]["required"]
            assert schema["consolidate_corpus"]["properties"]["dryRun"]["default"] is True
            for tool in tools.tools:  # every argument says what it is; every tool what it does to the store
                assert tool.description, tool.name
                for name, prop in tool.input_schema.get("properties", {}).items():
                    assert prop.get("description"), (tool.name, name)
                hints = tool.annotations
                assert hints is not None and hints.read_only_hint is (tool.name in READ_ONLY), tool.name
                if tool.name not in READ_ONLY:
                    assert hints.destructive_hint is (tool.name in DESTRUCTIVE), tool.name
            k = schema["recall"]["properties"]["k"]
            assert (k["minimum"], k["maximum"], k["default"]) == (1, 100, 10)
            assert schema["update_memory"]["properties"]["expectedVersion"]["minimum"] == 1
            importance = schema["remember"]["properties"]["importance"]
            assert (importance["minimum"], importance["maximum"]) == (0, 1)

            made = payload(await client.call_tool("remember", {"content": "User prefers dark mode", "tags": ["ui"]}))
            assert made["outcome"] == "created"
            mid = made["memory"]["id"]
            dup = payload(await client.call_tool("remember", {"content": "user prefers DARK mode"}))
            assert dup["outcome"] == "exact_duplicate"

            found = payload(await client.call_tool("recall", {"query": "dark mode", "k": 3}))
            assert found["count"] == 1 and found["data"][0]["memory"]["id"] == mid

            got = payload(await client.call_tool("get_memory", {"id": mid}))
            assert got["version"] == 1 and got["agent_id"] == "alice"

            new = payload(
                await client.call_tool(
                    "update_memory", {"id": mid, "expectedVersion": 1, "content": "User prefers light mode"}
                )
            )
            assert new["version"] == 2
            stale = await client.call_tool("update_memory", {"id": mid, "expectedVersion": 1, "pinned": True})
            text = error_text(stale)
            assert "CONFLICT:" in text and "version 2" in text and "get_memory" in text

            stale_delete = await client.call_tool("delete_memory", {"id": mid, "expectedVersion": 1})
            assert "CONFLICT:" in error_text(stale_delete) and "version 2" in error_text(stale_delete)
            gone = payload(await client.call_tool("delete_memory", {"id": mid, "expectedVersion": 2}))
            assert gone["deleted"] is True and gone["version"] == 2
            assert "NOT_FOUND" in error_text(await client.call_tool("get_memory", {"id": mid}))
            back = payload(await client.call_tool("restore_memory", {"id": mid}))
            assert back["id"] == mid and back["content"] == "User prefers light mode" and back["version"] == 3
            assert "NOT_FOUND" in error_text(
                await client.call_tool("delete_memory", {"id": bob_id, "expectedVersion": 1})
            )

            # another agent's memory does not exist for alice
            assert "NOT_FOUND" in error_text(await client.call_tool("get_memory", {"id": bob_id}))
            assert "NOT_FOUND" in error_text(await client.call_tool("restore_memory", {"id": bob_id}))
            bad = await client.call_tool("recall", {"query": "x", "k": 0})
            assert "INVALID_INPUT" in error_text(bad) and "k must be" in error_text(bad)

            health = payload(await client.call_tool("get_health", {}))
            assert health["overall_score"] == health["score"] and set(health["tier_distribution"]) == {
                "hot",
                "warm",
                "cold",
                "archive",
            }
            assert health["agent_id"] == "alice" and health["total"] == 1
            plan = payload(await client.call_tool("consolidate_corpus", {}))
            assert plan["dry_run"] is True
            promoted = payload(await client.call_tool("promote_memories", {}))
            assert {"promoted", "skipped_concurrent_edit"} <= set(promoted)

    anyio.run(session)
    audit = other.audit_events(mid_of(other))
    assert {e["actor"] for e in audit if e["action"] == "update"} == {"mcp:alice"}


def mid_of(store: MemoryStore) -> str:
    return next(r["id"] for r in store.list_memories("alice"))


def test_mcp_restore_of_a_row_edited_after_it_was_hidden_needs_expected_version(store: MemoryStore) -> None:
    from engram_pipeline.api.mcp_server import build_mcp
    from engram_pipeline.store.marks import mark_superseded

    old = store.remember("alice", "User lives in Berlin").memory
    new = store.remember("alice", "Completely different memory about tea").memory
    mark_superseded(store.engine, old, by=new["id"], reason="t", actor="t")
    store.update(old["id"], expected_version=2, tags=["edited"])

    async def session() -> None:
        async with Client(build_mcp(store, "alice")) as client:
            refused = error_text(await client.call_tool("restore_memory", {"id": old["id"]}))
            assert "CONFLICT:" in refused and "expectedVersion 3" in refused
            back = payload(await client.call_tool("restore_memory", {"id": old["id"], "expectedVersion": 3}))
            assert back["status"] == "active" and back["version"] == 4

    anyio.run(session)


def test_mcp_applies_only_a_named_reviewed_plan_and_only_as_admin(store: MemoryStore) -> None:
    from api_helpers import merged_as_reviewed, reviewed_plan_then_late_duplicate

    from engram_pipeline.api.mcp_server import build_mcp

    ids = reviewed_plan_then_late_duplicate(store, "alice")
    other = store.engine.save_plan("bob", {"clusters": []})
    table = (store.engine.memories.version, store.engine.plans.table.count_rows())

    async def session() -> None:
        async with Client(build_mcp(store, "alice")) as agent:
            plain = error_text(await agent.call_tool("consolidate_corpus", {"dryRun": False}))
            assert "FORBIDDEN" in plain and "--admin" in plain
            named = {"dryRun": False, "planId": ids["reviewed"]}
            assert "FORBIDDEN" in error_text(await agent.call_tool("consolidate_corpus", named))
        assert (store.engine.memories.version, store.engine.plans.table.count_rows()) == table
        async with Client(build_mcp(store, "alice", admin=True)) as admin:
            missing = error_text(await admin.call_tool("consolidate_corpus", {"dryRun": False}))
            assert "INVALID_INPUT" in missing and "planId" in missing
            for plan in ("plan-nope", other):  # unknown, or another agent's: not found either way
                text = error_text(await admin.call_tool("consolidate_corpus", {"dryRun": False, "planId": plan}))
                assert "NOT_FOUND" in text
            assert (store.engine.memories.version, store.engine.plans.table.count_rows()) == table
            report = payload(await admin.call_tool("consolidate_corpus", named))
            assert report["merged"] == 1 and report["plan_id"] == ids["reviewed"]

    anyio.run(session)
    assert merged_as_reviewed(store, ids)


def test_mcp_rejects_clusters_and_discards_plans_as_admin_only(store: MemoryStore) -> None:
    from api_helpers import two_clusters

    from engram_pipeline.api.mcp_server import build_mcp

    ids = two_clusters(store, "alice")
    (pid,) = ids["plan"]
    other = store.engine.save_plan("alice", store.engine.get_plan(pid)["body"])  # type: ignore[index]
    before = store.engine.memories.version

    async def session() -> None:
        async with Client(build_mcp(store, "alice")) as agent:
            for tool, args in (
                ("consolidate_corpus", {"dryRun": False, "planId": pid, "reject": [2]}),
                ("discard_merge_plan", {"planId": other}),
            ):
                assert "FORBIDDEN" in error_text(await agent.call_tool(tool, args))
        async with Client(build_mcp(store, "alice", admin=True)) as admin:
            bad = {"dryRun": False, "planId": pid, "reject": [5]}
            assert "INVALID_INPUT" in error_text(await admin.call_tool("consolidate_corpus", bad))
            early = {"planId": pid, "reject": [2]}
            assert "only used to apply" in error_text(await admin.call_tool("consolidate_corpus", early))
            assert store.engine.memories.version == before
            discarded = payload(await admin.call_tool("discard_merge_plan", {"planId": other}))
            assert (discarded["status"], discarded["discarded"]) == ("discarded", True)
            closed = error_text(await admin.call_tool("consolidate_corpus", {"dryRun": False, "planId": other}))
            assert f"CONFLICT: corpus-merge plan {other} was discarded by mcp:alice" in closed
            report = payload(
                await admin.call_tool("consolidate_corpus", {"dryRun": False, "planId": pid, "reject": [2]})
            )
            assert (report["rejected"], report["merged"]) == ([2], 1)
            again = payload(await admin.call_tool("consolidate_corpus", {}))
            assert again["clusters"] == 0

    anyio.run(session)
    rows = {r["id"]: r for r in store.list_memories("alice")}
    assert all(rows[i]["status"] == "active" for i in ids["2"]) and rows[ids["1"][1]]["superseded_by"] == ids["1"][0]


@pytest.mark.parametrize("tool", ["get_health", "promote_memories", "consolidate_corpus"])
def test_health_and_passes_of_an_agent_without_memories_are_not_found(store: MemoryStore, tool: str) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from engram_pipeline.api.mcp_server import build_mcp

    server = build_mcp(store, "newcomer", admin=True)
    with pytest.raises(ToolError, match="NOT_FOUND: unknown agent 'newcomer'"):
        anyio.run(server.call_tool, tool, {})
    assert store.engine.plans_of("newcomer") == []


def test_mcp_serves_while_the_embedder_loads(store_uri: str, settings: Settings, monkeypatch: Any) -> None:
    """``run_mcp`` starts serving stdio while the model loads (MiniLM takes seconds), not after the load."""
    from engram_pipeline.api import mcp_server

    store = MemoryStore.open(store_uri, settings=settings)
    held = HeldLoad(store.embedder.embed)
    served: list[bool] = []

    def run(self: Any, transport: str) -> None:  # stands in for the stdio loop
        served.append(held.loading.wait(10) and not held.returned.is_set())
        held.loaded.set()

    monkeypatch.setattr(store.embedder, "embed", held)
    monkeypatch.setattr(mcp_server.MemoryStore, "open", lambda **_: store)
    monkeypatch.setattr(mcp_server.MCPServer, "run", run)
    mcp_server.run_mcp("alice", settings)
    assert served == [True] and held.returned.wait(10)


def test_the_memory_tools_take_the_records_fields(store: MemoryStore) -> None:
    """``remember`` takes ``model.NewMemory``'s fields (with its defaults) and ``update_memory``
    ``model.MemoryChanges``' (all optional), camelCase, each described by the record's note; so update_memory
    sets what the HTTP API's PATCH sets, kind, tier, outcome and source included, and a null outcome clears it."""
    from engram_pipeline.api.mcp_server import build_mcp, camel
    from engram_pipeline.model import NEW_MEMORY_DEFAULTS, MemoryChanges, NewMemory, record_fields

    async def session() -> None:
        async with Client(build_mcp(store, "alice")) as client:
            schema = {t.name: t.input_schema for t in (await client.list_tools()).tools}
            for tool, record, own in (
                ("remember", NewMemory, {"content"}),
                ("update_memory", MemoryChanges, {"id", "expectedVersion"}),
            ):
                props = schema[tool]["properties"]
                fields = record_fields(record)
                assert set(props) == own | {camel(name) for name in fields}, tool
                assert set(schema[tool]["required"]) == own, tool
                for name, (_, note) in fields.items():
                    assert props[camel(name)]["description"] == note, (tool, name)
            for name, default in NEW_MEMORY_DEFAULTS.items():
                published = schema["remember"]["properties"][camel(name)]["default"]
                assert published == (list(default) if isinstance(default, tuple) else default), name
            assert "default" not in schema["update_memory"]["properties"]["outcome"]  # not given: not changed

            made = payload(
                await client.call_tool(
                    "remember",
                    {"content": "We ran the migration", "kind": "episodic", "tier": "stm", "ttlS": 600, "tags": None},
                )
            )["memory"]
            assert (made["kind"], made["tier"], made["source"], made["tags"]) == ("episodic", "stm", "agent", [])
            changes = {"kind": "semantic", "tier": "ltm", "outcome": "success", "source": "user", "confidence": 0.9}
            edited = payload(
                await client.call_tool("update_memory", {"id": made["id"], "expectedVersion": 1, **changes})
            )
            assert {k: edited[k] for k in changes} == changes and edited["version"] == 2
            cleared = payload(
                await client.call_tool(
                    "update_memory", {"id": made["id"], "expectedVersion": 2, "outcome": None, "pinned": None}
                )
            )
            assert cleared["outcome"] is None and cleared["pinned"] is False and cleared["version"] == 3
            assert cleared["kind"] == "semantic" and cleared["content"] == "We ran the migration"

    anyio.run(session)
    assert {e["actor"] for e in store.audit_events(mid_of(store)) if e["action"] == "update"} == {"mcp:alice"}
