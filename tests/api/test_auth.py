"""API keys: parsing, the keys file, constant-time lookup, and the loopback-only mode without keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engram_pipeline.api import create_app
from engram_pipeline.api.auth import KeyRing, check_bind, is_loopback, load_keys_file, parse_keys
from engram_pipeline.settings import Settings, SettingsError
from engram_pipeline.store import MemoryStore


def test_parse_keys() -> None:
    keys = parse_keys("bot:t1:alice, bob ;ops:t2:*")
    assert keys[0].agents == frozenset({"alice", "bob"}) and not keys[0].admin
    assert keys[1].admin and keys[1].may_access("anyone")


@pytest.mark.parametrize("text", ["bot:t1", "bot::alice", ":t:alice", "bot:t1:", "a:b:c:d"])
def test_parse_keys_refuses_malformed(text: str) -> None:
    with pytest.raises(SettingsError, match="ENGRAM_API_KEYS"):
        parse_keys(text)


def test_duplicate_names_refused() -> None:
    with pytest.raises(SettingsError, match="unique"):
        KeyRing(parse_keys("a:t1:x;a:t2:y"))


def test_keys_file_json_and_lines(tmp_path: Path) -> None:
    as_json = tmp_path / "keys.json"
    as_json.write_text(
        json.dumps([{"name": "bot", "token": "t", "agents": ["alice"]}, {"name": "ops", "token": "u", "agents": "*"}])
    )
    assert [k.admin for k in load_keys_file(str(as_json))] == [False, True]
    lines = tmp_path / "keys.txt"
    lines.write_text("# keys\nbot:t:alice\n\nops:u:*\n")
    assert [k.name for k in load_keys_file(str(lines))] == ["bot", "ops"]
    with pytest.raises(SettingsError, match="cannot read"):
        load_keys_file(str(tmp_path / "missing"))
    settings = Settings(api_keys_file=str(lines))
    ring = KeyRing.from_settings(settings)
    caller = ring.lookup("t")
    assert caller is not None and caller.actor == "api:bot" and ring.lookup("nope") is None


def test_bind_refused_without_keys() -> None:
    no_keys = KeyRing([])
    check_bind("127.0.0.1", no_keys)
    check_bind("::1", no_keys)
    check_bind("localhost", no_keys)
    with pytest.raises(SettingsError, match="refusing to bind to 0.0.0.0.*ENGRAM_API_KEYS"):
        check_bind("0.0.0.0", no_keys)
    check_bind("0.0.0.0", KeyRing(parse_keys("a:t:x")))
    assert is_loopback("127.0.0.2") and not is_loopback("10.0.0.1") and not is_loopback(None)


def test_no_keys_serves_loopback_only(store: MemoryStore) -> None:
    app = create_app(store, access_interval_s=0)
    body = {"agent_id": "alice", "content": "local write"}
    with TestClient(app, client=("127.0.0.1", 5000)) as local:
        r = local.post("/v1/memories", json=body)
        assert r.status_code == 201
        mid = r.json()["memory"]["id"]
        assert store.audit_events(mid) == [] or {e["actor"] for e in store.audit_events(mid)} == {"api:local"}
    with TestClient(app, client=("192.168.1.9", 5000)) as remote:
        r = remote.post("/v1/memories", json={**body, "content": "remote write"})
        assert r.status_code == 401 and "loopback" in r.json()["detail"]
    assert store.engine.memories.count_rows() == 1


@pytest.mark.integration
def test_server_refuses_public_bind_without_keys(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "ENGRAM_EMBEDDER": "hashing", "ENGRAM_DB_URI": str(tmp_path / "db"), "ENGRAM_API_KEYS": ""}
    env.pop("ENGRAM_API_KEYS_FILE", None)
    cmd = [sys.executable, "-m", "engram_pipeline.api", "--host", "0.0.0.0", "--port", "1"]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "refusing to bind to 0.0.0.0" in done.stderr and "ENGRAM_API_KEYS" in done.stderr
