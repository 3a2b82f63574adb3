"""Building a new memory row: validation of every field, tier routing, defaults from provenance."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, get_type_hints

from engram_pipeline.information import information_factors
from engram_pipeline.model import (
    DEFAULT_CONFIDENCE,
    KINDS,
    OUTCOMES,
    SOURCE_CONFIDENCE,
    SOURCES,
    TIERS,
    ImportedMemory,
    Memory,
    MemoryRecord,
    Tier,
    content_hash,
    dumps_metadata,
    utcnow,
)
from engram_pipeline.settings import Settings
from engram_pipeline.store import validation as v

# Words that mark a memory as time-bound: ``tier="auto"`` routes such content to short-term memory. Not an
# episode's: "I went to a support group yesterday" is a record of what happened, its time words relative to
# when it was written, and short-term rows expire (the retention rule in lifecycle/retention.py).
TIME_WORDS = re.compile(
    r"\b(today|tonight|tomorrow|yesterday|this (morning|afternoon|evening|week)|right now|for now|"
    r"currently|at the moment|temporarily|later today|in an? (hour|minute)|in \d+ (minutes|hours)|"
    r"next (hour|meeting)|until (tonight|tomorrow))\b",
    re.IGNORECASE,
)


# What a caller may ask for: a tier, or ``auto`` (routed by the content, see TIME_WORDS).
TIER_CHOICES: tuple[Tier | Literal["auto"], ...] = (*TIERS, "auto")


def build_row(
    settings: Settings,
    agent_id: str,
    content: str,
    *,
    tier: str = "auto",
    kind: str = "semantic",
    tags: Sequence[str] = (),
    source: str = "agent",
    outcome: str | None = None,
    pinned: bool = False,
    importance: float | None = None,
    confidence: float | None = None,
    metadata: dict[str, Any] | None = None,
    memory_id: str | None = None,
    created_at: datetime | None = None,
    ttl_s: int | None = None,
    last_accessed_at: datetime | None = None,
    access_count: int = 0,
) -> Memory:
    """Validate the fields of a new memory and build its row (without a vector). Raises InvalidInput.

    The rules are those of :mod:`engram_pipeline.store.validation`; nothing is checked here by hand.
    """
    v.check_id("agent_id", agent_id)
    v.check_text("content", content, max_bytes=settings.max_content_bytes)
    checked_kind = v.check_choice("kind", kind, KINDS)
    checked_source = v.check_choice("source", source, SOURCES)
    wanted_tier = v.check_choice("tier", tier, TIER_CHOICES)
    checked_outcome = None if outcome is None else v.check_choice("outcome", outcome, OUTCOMES)
    tags = v.check_tags(tags)
    pinned = v.check_bool("pinned", pinned)
    importance = None if importance is None else v.check_unit("importance", importance)
    confidence = None if confidence is None else v.check_unit("confidence", confidence)
    metadata = None if metadata is None else v.check_metadata(metadata)
    memory_id = None if memory_id is None else v.check_id("id", memory_id)
    created_at = None if created_at is None else v.check_time("created_at", created_at)
    last_accessed_at = None if last_accessed_at is None else v.check_time("last_accessed_at", last_accessed_at)
    ttl_s = None if ttl_s is None else v.check_ttl(ttl_s)
    access_count = v.check_count("access_count", access_count)
    now = utcnow()
    created = created_at or now
    chosen: Tier
    if wanted_tier == "auto":
        timed = kind != "episodic" and TIME_WORDS.search(content) is not None
        chosen = "stm" if ttl_s is not None or timed else "ltm"
    else:
        chosen = wanted_tier
    expires = created + timedelta(seconds=ttl_s or settings.stm_ttl_s) if chosen == "stm" else None
    # Typed as the record: the type checker holds this literal to exactly the columns of ``memories``.
    row: MemoryRecord = {
        "id": memory_id or uuid.uuid4().hex,
        "agent_id": agent_id,
        "tier": chosen,
        "kind": checked_kind,
        "content": content,
        "content_hash": content_hash(agent_id, content),
        "tags": sorted(dict.fromkeys(tags)),
        "source": checked_source,
        "outcome": checked_outcome,
        "importance": 0.5 if importance is None else float(importance),
        # how much it says, read once here (the passes carry it over): engram_pipeline/information.py
        "importance_factors": json.dumps(information_factors([content])[0]),
        "confidence": SOURCE_CONFIDENCE.get(source, DEFAULT_CONFIDENCE) if confidence is None else float(confidence),
        "access_count": access_count,
        "reinforcement_count": 0,
        "pinned": bool(pinned),
        "status": "active",
        "superseded_by": None,
        "contradiction_with": [],
        "created_at": created,
        "updated_at": now,
        "last_accessed_at": last_accessed_at,
        "decayed_at": None,
        "expires_at": expires,
        "version": 1,
        "write_token": None,
        "metadata": dumps_metadata(metadata or {}),
    }
    return dict(row)


# The fields a caller may give for a new memory: its agent, its content and the fields of ``model.ImportedMemory``
# (``build_row``'s keywords; ``memory_id`` is the ``id`` column; ``ttl_s`` is not a column, it sets ``expires_at``).
INPUT_FIELDS = frozenset(
    {"agent_id", "content", *("id" if name == "memory_id" else name for name in get_type_hints(ImportedMemory))}
)
