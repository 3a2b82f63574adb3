"""One typed settings object, read from the environment once and validated at boot.

Every variable of docs/design.md is a field here; the variable name, its meaning and any older name it is also read
from sit in the field's metadata, so the table below is the only place a name or a default is written
(:func:`env_table` renders it for docs/configuration.md). Library code receives a ``Settings``; it never
reads ``os.environ`` itself.

The three schedules once had near-identical variables (``STM_CONSOLIDATION_INTERVAL_MS``,
``MEMORY_CONSOLIDATION_INTERVAL_MS``, ``ENGRAM_CONSOLIDATION_INTERVAL_MS``); the first two are now
``ENGRAM_PROMOTION_INTERVAL_MS`` and ``ENGRAM_CORPUS_MERGE_INTERVAL_MS``, and their inherited names are still
read (setting both names to different values is refused).

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
# What may leave recall (engram_pipeline/lifecycle/retention.py): "signal" what "safe" lets go plus old,
# never-recalled noise (by the information score); "safe" only what is held elsewhere; "seed" the inherited
# score/age pruning and confidence archival.
RETENTION_POLICIES = ("signal", "safe", "seed")
# Who decides a merge (engram_pipeline/judge/): "auto" the pair model with the minilm embedder when its extra is
# installed, else the calibrated judge when the embedder ships weights, else the rules.
JUDGES = ("auto", "pair", "calibrated", "rules")

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
    home: str = _env(
        "ENGRAM_HOME",
        ".engram",
        doc="Directory of the store (`<home>/lancedb`) and of the Dagster instance; made absolute",
    )
    db_uri: str = _env(
        "ENGRAM_DB_URI",
        "",
        doc="LanceDB URI of the store (empty: `<ENGRAM_HOME>/lancedb`); a local path is made absolute",
    )  # empty: <home>/lancedb
    require_db_uri: bool = _env(
        "ENGRAM_REQUIRE_DB_URI",
        False,
        doc="`1` in a deployment: a process without `ENGRAM_DB_URI` refuses to start instead of opening a local "
        "store under `ENGRAM_HOME` (set it on every worker)",
    )
    metrics_dir: str = _env(
        "ENGRAM_METRICS_DIR",
        "",
        doc="Directory where each pass run writes its metrics for node_exporter's textfile collector "
        "(`engram_pass_*.prom`: rows scanned, acted on, skipped, duration, lease wait; docs/operate.md); empty: none",
    )
    storage_options: str = _env(
        "ENGRAM_STORAGE_OPTIONS", "", doc="JSON object of LanceDB storage options for object-storage URIs (`s3://...`)"
    )  # JSON object for object-storage URIs
    shards: int = _env(
        "ENGRAM_SHARDS",
        1,
        doc="Memory tables the store spreads agents over (a stable hash of `agent_id`), fixed when the store is "
        "made: it refuses to open with another count (`engram migrate --shards N` re-shards it). 1 suits one "
        "machine; a deployment sets about one shard per concurrent writer process (`bench/bench_shards.py`, "
        "4 writers on 2 busy cores, local directory: 0.8-1.8x the commits/s of one table at 2-8 shards over two "
        "runs, CPU-bound; opening 1.1-1.3x / 2.1-2.4x / 5.3-7.2x slower at 2 / 4 / 8)",
    )
    # embedders
    embedder: str = _env(
        "ENGRAM_EMBEDDER",
        "minilm",
        doc="`minilm`, `hashing` or `openai`; a store refuses to open with another embedder",
    )
    hashing_dim: int = _env("ENGRAM_HASHING_DIM", 384, doc="Dimension of the `hashing` embedder")
    openai_base_url: str = _env(
        "ENGRAM_OPENAI_BASE_URL",
        "http://127.0.0.1:11434/v1",
        doc="Base URL of an OpenAI-compatible `/v1/embeddings` endpoint",
    )
    openai_api_key: str = _env("ENGRAM_OPENAI_API_KEY", "", doc="Bearer key for that endpoint")
    openai_model: str = _env(
        "ENGRAM_OPENAI_MODEL", "text-embedding-3-small", doc="Embedding model name sent to that endpoint"
    )
    openai_dim: int = _env("ENGRAM_OPENAI_DIM", 1536, doc="Dimension that model returns")
    # STM to LTM promotion and expiry
    stm_access_threshold: int = _env(
        "STM_CONSOLIDATION_ACCESS_THRESHOLD", 3, doc="Accesses an STM row needs to be promoted to LTM"
    )
    stm_importance_threshold: float = _env(
        "STM_CONSOLIDATION_IMPORTANCE_THRESHOLD",
        0.5,
        unit=True,
        doc="Importance an STM row needs to be promoted to LTM",
    )
    stm_interval_ms: int = _env(
        "ENGRAM_PROMOTION_INTERVAL_MS",
        300_000,
        interval=True,
        aliases=("STM_CONSOLIDATION_INTERVAL_MS",),
        doc="STM-to-LTM promotion schedule (0 stops it)",
    )
    ltm_quota: int = _env("ENGRAM_LTM_QUOTA", 0, doc="Most LTM rows per agent that promotion fills (0: no quota)")
    stm_ttl_s: int = _env("STM_DEFAULT_TTL_S", 86_400, doc="Seconds an STM row lives before it expires")
    # importance and decay
    importance_half_life_days: float = _env(
        "MEMORY_IMPORTANCE_HALF_LIFE_DAYS", 14.0, doc="Half-life of the access-recency factor of importance"
    )
    decay_interval_ms: int = _env(
        "MEMORY_DECAY_INTERVAL_MS", 86_400_000, interval=True, doc="Importance decay schedule (0 stops it)"
    )
    # Rows per compare-and-set commit (and per cursor step). Each merge scans the table, so fewer, larger
    # batches are much faster: 1M rows took 60 s in 50k batches and 28 s in 250k batches.
    decay_batch_size: int = _env(
        "MEMORY_DECAY_BATCH_SIZE", 250_000, doc="Rows per compare-and-set commit and cursor step of the decay passes"
    )
    stale_threshold: float = _env(
        "MEMORY_DECAY_STALE_SCORE_THRESHOLD",
        0.3,
        unit=True,
        doc="Decay marks a row `stale` at or below this score (still recalled)",
    )
    prune_threshold: float = _env(
        "MEMORY_DECAY_PRUNE_SCORE_THRESHOLD",
        0.15,
        unit=True,
        doc="Decay may prune a row below this score (see the retention policy)",
    )
    prune_older_than_days: float = _env(
        "MEMORY_DECAY_PRUNE_OLDER_THAN_DAYS", 30.0, doc="Only rows older than this are pruned"
    )
    retention_policy: str = _env(
        "ENGRAM_RETENTION_POLICY",
        "signal",
        doc="`signal`: what `safe` lets go, plus noise (information below `ENGRAM_NOISE_THRESHOLD`) older than "
        "`ENGRAM_NOISE_ARCHIVE_AFTER_DAYS` and never recalled, archived; `safe`: only what is held elsewhere "
        "leaves recall; `seed`: the inherited pruning and archival (docs/retention.md)",
    )
    # Below every fact's cross-validated score on the training split (lowest 0.51) with a margin: archiving a fact
    # costs far more than keeping a greeting (bench/train_information.py reports the held-out figures at it).
    noise_threshold: float = _env(
        "ENGRAM_NOISE_THRESHOLD",
        0.3,
        unit=True,
        doc="A row whose information score (engram_pipeline/information.py) is below this is noise",
    )
    noise_archive_after_days: float = _env(
        "ENGRAM_NOISE_ARCHIVE_AFTER_DAYS",
        30.0,
        doc="Under `signal`, noise never recalled is archived once it is older than this many days",
    )
    # dedup, contradictions, corpus merge
    duplicate_threshold: float = _env(
        "MEMORY_DUPLICATE_THRESHOLD",
        0.97,
        unit=True,
        doc="Write-time dedup: similarity at or above which a new memory collapses into an existing one",
    )
    contradiction_threshold: float = _env(
        "MEMORY_CONTRADICTION_THRESHOLD",
        0.8,
        unit=True,
        doc="Lower end of the similarity band checked for contradictions",
    )
    contradiction_threshold_max: float = _env(
        "MEMORY_CONTRADICTION_THRESHOLD_MAX", 0.97, unit=True, doc="Upper end (exclusive) of that band"
    )
    contradiction_policy: str = _env(
        "MEMORY_CONTRADICTION_POLICY", "flag", doc="`flag` marks both rows `contradicted`; `supersede` hides the older"
    )
    merge_threshold: float = _env(
        "MEMORY_CONSOLIDATION_MERGE_THRESHOLD",
        0.85,
        unit=True,
        doc="Corpus merge: similarity at or above which near-duplicates are clustered",
    )
    judge: str = _env(
        "ENGRAM_JUDGE",
        "auto",
        doc="Who decides a merge: `auto`, `pair` (the pair model), `calibrated` (the embedder's judge) or `rules`",
    )
    merge_interval_ms: int = _env(
        "ENGRAM_CORPUS_MERGE_INTERVAL_MS",
        0,
        interval=True,
        aliases=("MEMORY_CONSOLIDATION_INTERVAL_MS",),
        doc="Corpus-merge plan schedule (0: stopped; plans still need a review to apply)",
    )
    # confidence, five-stage consolidation, archival
    # Per day: an unreinforced agent fact (0.72) with no competitors reaches the 0.40 archive floor in ~4 months.
    confidence_decay_rate: float = _env(
        "ENGRAM_CONFIDENCE_DECAY_RATE",
        0.005,
        unit=True,
        doc="Daily confidence decay rate, raised by competition from similar memories",
    )
    competition_min_similarity: float = _env(
        "ENGRAM_COMPETITION_MIN_SIMILARITY",
        0.6,
        unit=True,
        doc="Similarity from which a neighbour competes in confidence decay",
    )
    archive_confidence: float = _env(
        "ENGRAM_ARCHIVE_CONFIDENCE", 0.40, unit=True, doc="Archival: confidence below which faded rows are archived"
    )
    consolidation_interval_ms: int = _env(
        "ENGRAM_CONSOLIDATION_INTERVAL_MS",
        21_600_000,
        interval=True,
        doc="Five-stage consolidation schedule (0 stops it)",
    )
    episode_cluster_similarity: float = _env(
        "ENGRAM_EPISODE_CLUSTER_SIMILARITY",
        0.6,
        unit=True,
        doc="Mean similarity the episodes of one cluster keep (average linkage inside a session)",
    )
    episode_session_gap_s: int = _env(
        "ENGRAM_EPISODE_SESSION_GAP_S",
        21_600,
        doc="Seconds without an episode that end a session: episode clusters never span two sessions",
    )
    episode_cluster_min_size: int = _env(
        "ENGRAM_EPISODE_CLUSTER_MIN_SIZE", 2, doc="Episodes a cluster needs before beliefs are extracted from it"
    )
    belief_support_k: float = _env(
        "ENGRAM_BELIEF_SUPPORT_K", 3.0, doc="Support at which a belief's confidence is halfway to its ceiling"
    )
    procedure_min_support: int = _env("ENGRAM_PROCEDURE_MIN_SUPPORT", 2, doc="Episodes a procedure needs")
    procedure_min_success_rate: float = _env(
        "ENGRAM_PROCEDURE_MIN_SUCCESS_RATE", 0.6, unit=True, doc="Success rate a procedure needs"
    )
    schema_min_attributes: int = _env("ENGRAM_SCHEMA_MIN_ATTRIBUTES", 3, doc="Attributes a schema needs")
    schema_min_confidence: float = _env("ENGRAM_SCHEMA_MIN_CONFIDENCE", 0.6, unit=True, doc="Confidence a schema needs")
    # health and maintenance schedules
    health_interval_ms: int = _env(
        "ENGRAM_HEALTH_INTERVAL_MS", 3_600_000, interval=True, doc="Health report schedule (0 stops it)"
    )
    maintenance_interval_ms: int = _env(
        "ENGRAM_MAINTENANCE_INTERVAL_MS",
        86_400_000,
        interval=True,
        doc="Store maintenance (compact, clean up, index) schedule (0 stops it)",
    )
    # recall
    recall_weight_similarity: float = _env(
        "ENGRAM_RECALL_WEIGHT_SIMILARITY", 0.7, unit=True, doc="Recall score weight of similarity"
    )
    recall_weight_recency: float = _env(
        "ENGRAM_RECALL_WEIGHT_RECENCY", 0.2, unit=True, doc="Recall score weight of recency"
    )
    recall_weight_importance: float = _env(
        "ENGRAM_RECALL_WEIGHT_IMPORTANCE", 0.1, unit=True, doc="Recall score weight of importance"
    )
    recall_weight_noise: float = _env(
        "ENGRAM_RECALL_WEIGHT_NOISE",
        0.5,
        unit=True,
        doc="Recall score penalty of noise: this weight times how far a row's information score falls below "
        "`ENGRAM_NOISE_THRESHOLD`, as a share of it (0 for a fact)",
    )
    recall_recency_half_life_days: float = _env(
        "ENGRAM_RECALL_RECENCY_HALF_LIFE_DAYS", 30.0, doc="Half-life of the recency term of recall"
    )
    vector_index_min_rows: int = _env(
        "ENGRAM_VECTOR_INDEX_MIN_ROWS",
        50_000,
        doc="Rows from which maintenance builds a vector index (below: exact scan)",
    )
    # rows outside the vector index after which folding the access log re-indexes (0: leave it to maintenance)
    index_refresh_rows: int = _env(
        "ENGRAM_INDEX_REFRESH_ROWS",
        5_000,
        doc="Unindexed rows after which folding the access log re-indexes (0: leave it to maintenance)",
    )
    # rows of agents the write path keeps in memory for its checks (store/write/cache.py; 0: off)
    write_cache_rows: int = _env(
        "ENGRAM_WRITE_CACHE_ROWS",
        200_000,
        doc="Rows (over all agents) the write path keeps in memory for its duplicate checks (0: off)",
    )
    # API
    max_content_bytes: int = _env(
        "ENGRAM_MAX_CONTENT_BYTES", 10_240, doc="Largest memory content accepted, in bytes of UTF-8"
    )
    api_keys: str = _env(
        "ENGRAM_API_KEYS", "", doc="API keys: `name:token:agent1,agent2;admin:token2:*` (`*` = admin)"
    )  # "name:token:agent1,agent2;admin:token2:*"
    api_keys_file: str = _env(
        "ENGRAM_API_KEYS_FILE", "", doc="File of API keys (JSON or the same `name:token:agents` lines)"
    )
    # the Dagster UI
    ui_path_prefix: str = _env(
        "ENGRAM_UI_PATH_PREFIX",
        "",
        doc="The `--path-prefix` the Dagster UI is served under (`/dagster`; empty: its root): the plan page's "
        "launch links start with it (set it on the processes that run the plan)",
    )
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
            if name is None:
                continue
            given = {n: env[n] for n in (name, *f.metadata.get("aliases", ())) if env.get(n, "") != ""}
            if not given:
                continue
            if len(set(given.values())) > 1:
                raise SettingsError(f"{' and '.join(given)} name the same setting and disagree: set only {name}")
            used, raw = next(iter(given.items()))
            values[f.name] = _parse(used, raw, f.default)
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
        if self.ui_path_prefix and (not self.ui_path_prefix.startswith("/") or self.ui_path_prefix.endswith("/")):
            raise SettingsError(
                f"ENGRAM_UI_PATH_PREFIX={self.ui_path_prefix!r}: must start with '/' and not end with one "
                "(as dagster-webserver's --path-prefix, e.g. /dagster), or be empty"
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
            ("ENGRAM_EPISODE_SESSION_GAP_S", self.episode_session_gap_s),
            ("MEMORY_DECAY_PRUNE_OLDER_THAN_DAYS", self.prune_older_than_days),
            ("ENGRAM_NOISE_ARCHIVE_AFTER_DAYS", self.noise_archive_after_days),
            ("ENGRAM_MAX_CONTENT_BYTES", self.max_content_bytes),
            ("ENGRAM_INDEX_REFRESH_ROWS", self.index_refresh_rows),
            ("ENGRAM_WRITE_CACHE_ROWS", self.write_cache_rows),
        ):
            if value < 0:
                raise SettingsError(f"{name}={value}: cannot be negative")
        for name, value in (
            ("MEMORY_IMPORTANCE_HALF_LIFE_DAYS", self.importance_half_life_days),
            ("ENGRAM_RECALL_RECENCY_HALF_LIFE_DAYS", self.recall_recency_half_life_days),
            ("MEMORY_DECAY_BATCH_SIZE", self.decay_batch_size),
            ("ENGRAM_SHARDS", self.shards),
        ):
            if value <= 0:
                raise SettingsError(f"{name}={value}: must be positive")
        if self.require_db_uri and not self.db_uri:
            raise SettingsError(
                "ENGRAM_REQUIRE_DB_URI is set but ENGRAM_DB_URI is not: this process would open a local store "
                f"under ENGRAM_HOME ({self.home!r}) instead of the shared one; set ENGRAM_DB_URI here as on the "
                "other processes"
            )
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


def env_table() -> str:
    """Every variable as a markdown table (variable, default, meaning): docs/configuration.md carries it, and
    ``python -m engram_pipeline.settings`` prints it (a test checks that the two agree).

    >>> env_table().splitlines()[2].split(" | ")[0]
    '| `ENGRAM_HOME`'
    """
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(Settings):
        name = f.metadata.get("env")
        if name is None:
            continue
        default = f"`{f.default}`" if f.default != "" else "(empty)"
        meaning = f.metadata["doc"]
        if f.metadata.get("unit"):
            meaning += "; within [0, 1]"
        if f.metadata.get("interval"):
            meaning += "; milliseconds"
        if f.name in PROFILE_FIELDS:
            meaning += "; the embedder's calibrated profile sets it unless the variable is set"
        aliases = f.metadata.get("aliases", ())
        if aliases:
            meaning += "; also read from " + ", ".join(f"`{a}`" for a in aliases) + " (the inherited name)"
        lines.append(f"| `{name}` | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


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


if __name__ == "__main__":
    print(env_table(), end="")
