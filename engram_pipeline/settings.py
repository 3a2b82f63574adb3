"""One typed settings object, read from the environment once and validated at boot.

Every variable of DESIGN.md is a field here; the variable name sits in the field's metadata, so the table
below is the only place a name or a default is written. Library code receives a ``Settings``; it never reads
``os.environ`` itself.

>>> s = Settings.from_env({"MEMORY_DUPLICATE_THRESHOLD": "0.95"})
>>> s.duplicate_threshold, "MEMORY_DUPLICATE_THRESHOLD" in s.explicit
(0.95, True)
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Where the memory API listens unless told otherwise: `engram serve`, `python -m engram_pipeline.api` and the
# client's default base URL all read these two.
API_HOST = "127.0.0.1"
API_PORT = 8080
DEFAULT_API_URL = f"http://{API_HOST}:{API_PORT}"

CONTRADICTION_POLICIES = ("flag", "supersede")
# What may leave recall (engram_pipeline/lifecycle/retention.py): "safe" only what is held elsewhere;
# "seed" the inherited score/age pruning and confidence archival.
RETENTION_POLICIES = ("safe", "seed")
# Who decides a merge (engram_pipeline/judge.py): "auto" the calibrated judge when the embedder ships weights.
JUDGES = ("auto", "calibrated", "rules")

# Fields that an embedder's calibrated threshold profile may set when the variable is not set explicitly.
PROFILE_FIELDS = (
    "duplicate_threshold",
    "merge_threshold",
    "contradiction_threshold",
    "contradiction_threshold_max",
)


class SettingsError(ValueError):
    """A variable has a value the engine refuses; the message names the variable and the rule."""


def _env(name: str, default: Any, **kw: Any) -> Any:
    return field(default=default, metadata={"env": name, **kw})


@dataclass(frozen=True)
class Settings:
    # where the store lives
    home: str = _env("ENGRAM_HOME", ".engram")
    db_uri: str = _env("ENGRAM_DB_URI", "")  # empty: <home>/lancedb
    storage_options: str = _env("ENGRAM_STORAGE_OPTIONS", "")  # JSON object for object-storage URIs
    # embedders
    embedder: str = _env("ENGRAM_EMBEDDER", "minilm")
    hashing_dim: int = _env("ENGRAM_HASHING_DIM", 384)
    openai_base_url: str = _env("ENGRAM_OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    openai_api_key: str = _env("ENGRAM_OPENAI_API_KEY", "")
    openai_model: str = _env("ENGRAM_OPENAI_MODEL", "text-embedding-3-small")
    openai_dim: int = _env("ENGRAM_OPENAI_DIM", 1536)
    # STM to LTM promotion and expiry
    stm_access_threshold: int = _env("STM_CONSOLIDATION_ACCESS_THRESHOLD", 3)
    stm_importance_threshold: float = _env("STM_CONSOLIDATION_IMPORTANCE_THRESHOLD", 0.5, unit=True)
    stm_interval_ms: int = _env("STM_CONSOLIDATION_INTERVAL_MS", 300_000, interval=True)
    ltm_quota: int = _env("ENGRAM_LTM_QUOTA", 0)
    stm_ttl_s: int = _env("STM_DEFAULT_TTL_S", 86_400)
    # importance and decay
    importance_half_life_days: float = _env("MEMORY_IMPORTANCE_HALF_LIFE_DAYS", 14.0)
    decay_interval_ms: int = _env("MEMORY_DECAY_INTERVAL_MS", 86_400_000, interval=True)
    # Rows per compare-and-set commit (and per cursor step). Each merge scans the table, so fewer, larger
    # batches are much faster: 1M rows took 60 s in 50k batches and 28 s in 250k batches.
    decay_batch_size: int = _env("MEMORY_DECAY_BATCH_SIZE", 250_000)
    stale_threshold: float = _env("MEMORY_DECAY_STALE_SCORE_THRESHOLD", 0.3, unit=True)
    prune_threshold: float = _env("MEMORY_DECAY_PRUNE_SCORE_THRESHOLD", 0.15, unit=True)
    prune_older_than_days: float = _env("MEMORY_DECAY_PRUNE_OLDER_THAN_DAYS", 30.0)
    retention_policy: str = _env("ENGRAM_RETENTION_POLICY", "safe")
    # dedup, contradictions, corpus merge
    duplicate_threshold: float = _env("MEMORY_DUPLICATE_THRESHOLD", 0.97, unit=True)
    contradiction_threshold: float = _env("MEMORY_CONTRADICTION_THRESHOLD", 0.8, unit=True)
    contradiction_threshold_max: float = _env("MEMORY_CONTRADICTION_THRESHOLD_MAX", 0.97, unit=True)
    contradiction_policy: str = _env("MEMORY_CONTRADICTION_POLICY", "flag")
    merge_threshold: float = _env("MEMORY_CONSOLIDATION_MERGE_THRESHOLD", 0.85, unit=True)
    judge: str = _env("ENGRAM_JUDGE", "auto")
    merge_interval_ms: int = _env("MEMORY_CONSOLIDATION_INTERVAL_MS", 0, interval=True)
    # confidence, five-stage consolidation, archival
    # Per day: an unreinforced agent fact (0.72) with no competitors reaches the 0.40 archive floor in ~4 months.
    confidence_decay_rate: float = _env("ENGRAM_CONFIDENCE_DECAY_RATE", 0.005, unit=True)
    competition_min_similarity: float = _env("ENGRAM_COMPETITION_MIN_SIMILARITY", 0.6, unit=True)
    archive_confidence: float = _env("ENGRAM_ARCHIVE_CONFIDENCE", 0.40, unit=True)
    consolidation_interval_ms: int = _env("ENGRAM_CONSOLIDATION_INTERVAL_MS", 21_600_000, interval=True)
    episode_cluster_similarity: float = _env("ENGRAM_EPISODE_CLUSTER_SIMILARITY", 0.6, unit=True)
    episode_cluster_min_size: int = _env("ENGRAM_EPISODE_CLUSTER_MIN_SIZE", 2)
    belief_support_k: float = _env("ENGRAM_BELIEF_SUPPORT_K", 3.0)
    procedure_min_support: int = _env("ENGRAM_PROCEDURE_MIN_SUPPORT", 2)
    procedure_min_success_rate: float = _env("ENGRAM_PROCEDURE_MIN_SUCCESS_RATE", 0.6, unit=True)
    schema_min_attributes: int = _env("ENGRAM_SCHEMA_MIN_ATTRIBUTES", 3)
    schema_min_confidence: float = _env("ENGRAM_SCHEMA_MIN_CONFIDENCE", 0.6, unit=True)
    # health and maintenance schedules
    health_interval_ms: int = _env("ENGRAM_HEALTH_INTERVAL_MS", 3_600_000, interval=True)
    maintenance_interval_ms: int = _env("ENGRAM_MAINTENANCE_INTERVAL_MS", 86_400_000, interval=True)
    # recall
    recall_weight_similarity: float = _env("ENGRAM_RECALL_WEIGHT_SIMILARITY", 0.7, unit=True)
    recall_weight_recency: float = _env("ENGRAM_RECALL_WEIGHT_RECENCY", 0.2, unit=True)
    recall_weight_importance: float = _env("ENGRAM_RECALL_WEIGHT_IMPORTANCE", 0.1, unit=True)
    recall_recency_half_life_days: float = _env("ENGRAM_RECALL_RECENCY_HALF_LIFE_DAYS", 30.0)
    vector_index_min_rows: int = _env("ENGRAM_VECTOR_INDEX_MIN_ROWS", 50_000)
    # rows outside the vector index after which folding the access log re-indexes (0: leave it to maintenance)
    index_refresh_rows: int = _env("ENGRAM_INDEX_REFRESH_ROWS", 5_000)
    # API
    max_content_bytes: int = _env("ENGRAM_MAX_CONTENT_BYTES", 10_240)
    api_keys: str = _env("ENGRAM_API_KEYS", "")  # "name:token:agent1,agent2;admin:token2:*"
    api_keys_file: str = _env("ENGRAM_API_KEYS_FILE", "")
    # variables that were set explicitly (they win over an embedder's threshold profile)
    explicit: frozenset[str] = field(default=frozenset(), compare=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every variable from ``env`` (default ``os.environ``) and validate."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        explicit = set()
        for f in dataclasses.fields(cls):
            name = f.metadata.get("env")
            if name is None or name not in env or env[name] == "":
                continue
            values[f.name] = _parse(name, env[name], f.default)
            explicit.add(name)
        settings = cls(**values, explicit=frozenset(explicit))
        settings.validate()
        return settings

    def replace(self, **changes: Any) -> Settings:
        """A validated copy with ``changes``; changed fields count as explicitly set."""
        names = {f.name: f.metadata.get("env") for f in dataclasses.fields(self)}
        explicit = self.explicit | {str(names[k]) for k in changes if names.get(k)}
        new = dataclasses.replace(self, **changes, explicit=frozenset(explicit))
        new.validate()
        return new

    def with_profile(self, profile: Mapping[str, float]) -> Settings:
        """Apply an embedder's calibrated thresholds to every threshold not set explicitly."""
        envs = {f.name: f.metadata.get("env") for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {
            k: float(v) for k, v in profile.items() if k in PROFILE_FIELDS and envs[k] not in self.explicit
        }
        new = dataclasses.replace(self, **changes)
        new.validate()
        return new

    def validate(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            name = f.metadata.get("env")
            if f.metadata.get("unit") and not 0.0 <= value <= 1.0:
                raise SettingsError(f"{name}={value}: must be within [0, 1]")
            if f.metadata.get("interval") and value < 0:
                raise SettingsError(f"{name}={value}: an interval cannot be negative (0 disables the schedule)")
        if self.merge_threshold >= self.duplicate_threshold:
            raise SettingsError(
                f"MEMORY_CONSOLIDATION_MERGE_THRESHOLD={self.merge_threshold} must be below "
                f"MEMORY_DUPLICATE_THRESHOLD={self.duplicate_threshold}"
            )
        if self.contradiction_threshold >= self.contradiction_threshold_max:
            raise SettingsError(
                f"MEMORY_CONTRADICTION_THRESHOLD={self.contradiction_threshold} must be below "
                f"MEMORY_CONTRADICTION_THRESHOLD_MAX={self.contradiction_threshold_max}"
            )
        if self.contradiction_policy not in CONTRADICTION_POLICIES:
            raise SettingsError(
                f"MEMORY_CONTRADICTION_POLICY={self.contradiction_policy!r}: must be one of "
                f"{', '.join(CONTRADICTION_POLICIES)}"
            )
        if self.judge not in JUDGES:
            raise SettingsError(f"ENGRAM_JUDGE={self.judge!r}: must be one of {', '.join(JUDGES)}")
        if self.retention_policy not in RETENTION_POLICIES:
            raise SettingsError(
                f"ENGRAM_RETENTION_POLICY={self.retention_policy!r}: must be one of {', '.join(RETENTION_POLICIES)}"
            )
        if self.prune_threshold > self.stale_threshold:
            raise SettingsError(
                f"MEMORY_DECAY_PRUNE_SCORE_THRESHOLD={self.prune_threshold} must not exceed "
                f"MEMORY_DECAY_STALE_SCORE_THRESHOLD={self.stale_threshold}"
            )
        for name, value in (
            ("ENGRAM_LTM_QUOTA", self.ltm_quota),
            ("STM_DEFAULT_TTL_S", self.stm_ttl_s),
            ("MEMORY_DECAY_PRUNE_OLDER_THAN_DAYS", self.prune_older_than_days),
            ("ENGRAM_MAX_CONTENT_BYTES", self.max_content_bytes),
            ("ENGRAM_INDEX_REFRESH_ROWS", self.index_refresh_rows),
        ):
            if value < 0:
                raise SettingsError(f"{name}={value}: cannot be negative")
        for name, value in (
            ("MEMORY_IMPORTANCE_HALF_LIFE_DAYS", self.importance_half_life_days),
            ("ENGRAM_RECALL_RECENCY_HALF_LIFE_DAYS", self.recall_recency_half_life_days),
            ("MEMORY_DECAY_BATCH_SIZE", self.decay_batch_size),
        ):
            if value <= 0:
                raise SettingsError(f"{name}={value}: must be positive")
        if self.storage_options:
            try:
                options = json.loads(self.storage_options)
            except json.JSONDecodeError as exc:
                raise SettingsError(f"ENGRAM_STORAGE_OPTIONS: not valid JSON ({exc.msg})") from None
            if not isinstance(options, dict):
                raise SettingsError("ENGRAM_STORAGE_OPTIONS: must be a JSON object")

    @property
    def resolved_db_uri(self) -> str:
        """The LanceDB URI: ``ENGRAM_DB_URI`` if set, else ``<ENGRAM_HOME>/lancedb``; a local path is made
        absolute (against the working directory), so every process and every later ``cd`` agree on it."""
        uri = self.db_uri or str(Path(self.home) / "lancedb")
        return uri if "://" in uri else str(Path(uri).expanduser().resolve())

    @property
    def storage_options_dict(self) -> dict[str, str]:
        return dict(json.loads(self.storage_options)) if self.storage_options else {}


def _parse(name: str, raw: str, default: Any) -> Any:
    kind = type(default)
    try:
        if kind is bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a{'n integer' if kind is int else ' number'}") from None
    return raw
