"""The memory store on LanceDB: tables, compare-and-set writes, links, audit, restore, cursors, maintenance."""

from engram_pipeline.store.lancedb_import import import_lancedb

import_lancedb()  # first, before a module below imports lancedb: see lancedb_import

# ruff: noqa: E402
from engram_pipeline.store.errors import (
    EmbedderMismatch,
    InvalidInput,
    MemoryNotFound,
    MigrationInProgress,
    NothingToRestore,
    PlanClosed,
    PlanNotFound,
    RestoreConflict,
    RestoreDuplicate,
    ShardCountMismatch,
    StoreError,
    StoreNotFound,
    UnknownAgent,
    VersionConflict,
)
from engram_pipeline.store.memory_store import MemoryStore
from engram_pipeline.store.results import CasResult, RememberResult

__all__ = [
    "CasResult",
    "EmbedderMismatch",
    "InvalidInput",
    "MemoryNotFound",
    "MemoryStore",
    "MigrationInProgress",
    "NothingToRestore",
    "PlanClosed",
    "PlanNotFound",
    "RememberResult",
    "RestoreConflict",
    "RestoreDuplicate",
    "ShardCountMismatch",
    "StoreError",
    "StoreNotFound",
    "UnknownAgent",
    "VersionConflict",
]
