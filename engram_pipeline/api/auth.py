"""Bearer API keys: who a caller is and which agents' memories it may touch.

Keys come from ``ENGRAM_API_KEYS`` and/or the file named by ``ENGRAM_API_KEYS_FILE``. Each key has a name
(used in the audit trail as ``api:<name>``), a secret token, and a scope: a set of agent ids, or ``*`` for an
admin key (every agent, plus the admin routes that run lifecycle passes).

``ENGRAM_API_KEYS`` holds entries separated by ``;``, each ``name:token:scope`` where scope is a
comma-separated list of agent ids or ``*``::

    ENGRAM_API_KEYS="support-bot:s3cret:alice,bob;ops:adm1n:*"

The keys file is either JSON (a list of ``{"name", "token", "agents": [...] | "*"}`` objects) or text with one
``name:token:scope`` entry per line (blank lines and ``#`` comments ignored).

With no keys configured the API trusts loopback callers only (the ``local`` caller, admin); the server
refuses to bind to anything else (see :func:`check_bind`).

>>> keys = parse_keys("bot:t1:alice,bob;ops:t2:*")
>>> [(k.name, sorted(k.agents), k.admin) for k in keys]
[('bot', ['alice', 'bob'], False), ('ops', [], True)]
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from engram_pipeline.settings import Settings, SettingsError

LOOPBACK_HOSTS = ("localhost",)


@dataclass(frozen=True)
class ApiKey:
    name: str
    token: str
    agents: frozenset[str]
    admin: bool = False

    def may_access(self, agent_id: str) -> bool:
        return self.admin or agent_id in self.agents


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one request."""

    name: str
    admin: bool
    agents: frozenset[str]

    @property
    def actor(self) -> str:
        """The audit actor of this caller's writes."""
        return f"api:{self.name}"

    def may_access(self, agent_id: str) -> bool:
        return self.admin or agent_id in self.agents


LOCAL_CALLER = Caller("local", admin=True, agents=frozenset())


class KeyRing:
    """The configured keys; looks a token up in constant time per key."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self.keys = tuple(keys)
        names = [k.name for k in self.keys]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SettingsError(f"ENGRAM_API_KEYS: key names must be unique; repeated: {', '.join(dupes)}")

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        keys = parse_keys(settings.api_keys, source="ENGRAM_API_KEYS") if settings.api_keys else []
        if settings.api_keys_file:
            keys += load_keys_file(settings.api_keys_file)
        return cls(keys)

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def lookup(self, token: str) -> Caller | None:
        found = None
        for key in self.keys:  # compare against every key, so timing does not reveal which one matched
            if hmac.compare_digest(key.token.encode(), token.encode()):
                found = key
        if found is None:
            return None
        return Caller(found.name, admin=found.admin, agents=found.agents)


def _key(name: str, token: str, scope: str | list[str], source: str) -> ApiKey:
    name, token = name.strip(), token.strip()
    if not name or not token:
        raise SettingsError(f"{source}: every key needs a name and a token (name:token:scope)")
    if scope == "*" or scope == ["*"]:
        return ApiKey(name, token, frozenset(), admin=True)
    agents = [a.strip() for a in scope.split(",")] if isinstance(scope, str) else [str(a).strip() for a in scope]
    agents = [a for a in agents if a]
    if not agents:
        raise SettingsError(f"{source}: key {name!r} has no scope; give agent ids (a,b) or * for admin")
    return ApiKey(name, token, frozenset(agents))


def parse_keys(text: str, *, source: str = "ENGRAM_API_KEYS") -> list[ApiKey]:
    """Parse ``name:token:scope`` entries separated by ``;`` or newlines."""
    keys = []
    for raw in text.replace("\n", ";").split(";"):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        parts = entry.split(":")
        if len(parts) != 3:
            raise SettingsError(f"{source}: entry {parts[0]!r}... is not name:token:scope")
        keys.append(_key(parts[0], parts[1], parts[2], source))
    return keys


def load_keys_file(path: str) -> list[ApiKey]:
    source = f"ENGRAM_API_KEYS_FILE={path}"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SettingsError(f"{source}: cannot read it ({exc.strerror})") from None
    if not text.lstrip().startswith("["):
        return parse_keys(text, source=source)
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{source}: not valid JSON ({exc.msg})") from None
    keys = []
    for e in entries:
        if not isinstance(e, dict) or not {"name", "token", "agents"} <= set(e):
            raise SettingsError(f'{source}: each entry needs name, token and agents (a list, or "*")')
        keys.append(_key(str(e["name"]), str(e["token"]), e["agents"], source))
    return keys


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: KeyRing) -> None:
    """Refuse to serve a non-loopback address without API keys (anyone reaching it could read everything)."""
    if not keys.enabled and not is_loopback(host):
        raise SettingsError(
            f"refusing to bind to {host}: no API keys are configured, so the API only serves loopback "
            "(127.0.0.1 / ::1). Set ENGRAM_API_KEYS (name:token:agent1,agent2;admin:token2:*) or "
            "ENGRAM_API_KEYS_FILE, or bind to 127.0.0.1."
        )
