"""Engram pipeline: the lifecycle engine of an agent memory store on LanceDB.

The library's public names, importable from the package root::

    from engram_pipeline import MemoryStore, Settings, VersionConflict

    store = MemoryStore.open("./.engram/lancedb", settings=Settings.from_env())

Each name is loaded on first use (:func:`__getattr__`), so ``import engram_pipeline`` (and every ``engram``
command, which imports it) does not pay for LanceDB, polars or the passes until it needs them. The HTTP
client is :mod:`engram_pipeline.client`; the package ships ``py.typed``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it (one place; __all__ and the type checker's view derive from it)
_HOMES = {
    "MemoryStore": "engram_pipeline.store",
    "RememberResult": "engram_pipeline.store",
    "CasResult": "engram_pipeline.store",
    "StoreError": "engram_pipeline.store",
    "InvalidInput": "engram_pipeline.store",
    "MemoryNotFound": "engram_pipeline.store",
    "VersionConflict": "engram_pipeline.store",
    "NothingToRestore": "engram_pipeline.store",
    "RestoreConflict": "engram_pipeline.store",
    "RestoreDuplicate": "engram_pipeline.store",
    "PlanClosed": "engram_pipeline.store",
    "PlanNotFound": "engram_pipeline.store",
    "UnknownAgent": "engram_pipeline.store",
    "StoreNotFound": "engram_pipeline.store",
    "EmbedderMismatch": "engram_pipeline.store",
    "ShardCountMismatch": "engram_pipeline.store",
    "MigrationInProgress": "engram_pipeline.store",
    "Settings": "engram_pipeline.settings",
    "Memory": "engram_pipeline.model",
    "MemoryRecord": "engram_pipeline.model",
    "MemoryChanges": "engram_pipeline.model",
    "NewMemory": "engram_pipeline.model",
    "PlacedMemory": "engram_pipeline.model",
    "PlanRecord": "engram_pipeline.model",
    "Kind": "engram_pipeline.model",
    "Status": "engram_pipeline.model",
    "Tier": "engram_pipeline.model",
    "Source": "engram_pipeline.model",
    "run_pipeline": "engram_pipeline.lifecycle.pipeline",
    "PipelineReport": "engram_pipeline.lifecycle.pipeline",
    "import_jsonl": "engram_pipeline.importer",
    "export_jsonl": "engram_pipeline.importer",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'engram_pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the names as the type checker sees them (``X as X``: re-exported)
    from engram_pipeline.importer import (
        export_jsonl as export_jsonl,
    )
    from engram_pipeline.importer import (
        import_jsonl as import_jsonl,
    )
    from engram_pipeline.lifecycle.pipeline import (
        PipelineReport as PipelineReport,
    )
    from engram_pipeline.lifecycle.pipeline import (
        run_pipeline as run_pipeline,
    )
    from engram_pipeline.model import (
        Kind as Kind,
    )
    from engram_pipeline.model import (
        Memory as Memory,
    )
    from engram_pipeline.model import (
        MemoryChanges as MemoryChanges,
    )
    from engram_pipeline.model import (
        MemoryRecord as MemoryRecord,
    )
    from engram_pipeline.model import (
        NewMemory as NewMemory,
    )
    from engram_pipeline.model import (
        PlacedMemory as PlacedMemory,
    )
    from engram_pipeline.model import (
        PlanRecord as PlanRecord,
    )
    from engram_pipeline.model import (
        Source as Source,
    )
    from engram_pipeline.model import (
        Status as Status,
    )
    from engram_pipeline.model import (
        Tier as Tier,
    )
    from engram_pipeline.settings import (
        Settings as Settings,
    )
    from engram_pipeline.store import (
        CasResult as CasResult,
    )
    from engram_pipeline.store import (
        EmbedderMismatch as EmbedderMismatch,
    )
    from engram_pipeline.store import (
        InvalidInput as InvalidInput,
    )
    from engram_pipeline.store import (
        MemoryNotFound as MemoryNotFound,
    )
    from engram_pipeline.store import (
        MemoryStore as MemoryStore,
    )
    from engram_pipeline.store import (
        MigrationInProgress as MigrationInProgress,
    )
    from engram_pipeline.store import (
        NothingToRestore as NothingToRestore,
    )
    from engram_pipeline.store import (
        PlanClosed as PlanClosed,
    )
    from engram_pipeline.store import (
        PlanNotFound as PlanNotFound,
    )
    from engram_pipeline.store import (
        RememberResult as RememberResult,
    )
    from engram_pipeline.store import (
        RestoreConflict as RestoreConflict,
    )
    from engram_pipeline.store import (
        RestoreDuplicate as RestoreDuplicate,
    )
    from engram_pipeline.store import (
        ShardCountMismatch as ShardCountMismatch,
    )
    from engram_pipeline.store import (
        StoreError as StoreError,
    )
    from engram_pipeline.store import (
        StoreNotFound as StoreNotFound,
    )
    from engram_pipeline.store import (
        UnknownAgent as UnknownAgent,
    )
    from engram_pipeline.store import (
        VersionConflict as VersionConflict,
    )
