"""Resources: the memory store, bound from the environment here and nowhere else.

``EngramStore`` opens :class:`~engram_pipeline.store.MemoryStore` once per process and hands it to every asset
of the run, and to every later run of the same process with the same URI and settings (:func:`shared_store`):
opening a store reads every shard's tables (about 1.5 s per shard on S3 in the trial of issue 38) and builds
the embedder, and a Celery worker builds the resources afresh for each run it executes. Its ``uri`` and
``embedder`` override ``ENGRAM_DB_URI`` and ``ENGRAM_EMBEDDER``; every other knob (thresholds, intervals, ...)
comes from :class:`~engram_pipeline.settings.Settings` read from the environment.
Tests bind ``EngramStore(uri=str(tmp_path / "store"), embedder="hashing")``.

Each process reads its own environment: :func:`engram_resources` binds the two fields with Dagster's ``EnvVar``
when they are set, so the process that executes a run (a Celery worker, say) resolves them when it starts the
resource, and one that lacks a variable the code location was loaded with fails at resource start instead of
opening another store. Left empty (a laptop: ``make demo``, ``make ui``), the store is ``<ENGRAM_HOME>/lancedb``
of the executing process. A deployment sets ``ENGRAM_REQUIRE_DB_URI=1`` everywhere: a process without
``ENGRAM_DB_URI`` then refuses to load the settings at all.

``RunScopedIOManager`` hands the neighbour graph (and the episode clusters) to the passes of the same run,
so a full pipeline run computes the graph once. A pass run on its own, in a later run or a re-execution, gets
``None`` and builds a fresh graph itself: a graph is only used by the run that computed it, so no pass ever
works on pairs older than its run, and a backfill of any single asset works.
"""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dagster import ConfigurableIOManager, ConfigurableResource, EnvVar, InputContext, MetadataValue, OutputContext
from pydantic import Field, PrivateAttr

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore


class EngramStore(ConfigurableResource):
    """The Engram memory store (LanceDB)."""

    uri: str = Field(default="", description="LanceDB URI; empty: ENGRAM_DB_URI, else <ENGRAM_HOME>/lancedb")
    embedder: str = Field(default="", description="hashing | minilm | openai; empty: ENGRAM_EMBEDDER")

    _store: MemoryStore | None = PrivateAttr(default=None)

    def settings(self) -> Settings:
        settings = Settings.from_env()
        return settings.replace(embedder=self.embedder) if self.embedder else settings

    def open(self) -> MemoryStore:
        """The store, opened on first use and kept for the life of this process (:func:`shared_store`)."""
        if self._store is None:
            self._store = shared_store(self.uri, self.settings())
        return self._store


# The stores this process opened, by (uri, settings), the most recently used last. A worker uses one; the bound
# keeps a process that runs many stores (a test session) from holding every one open.
_SHARED: OrderedDict[tuple[str, Settings, frozenset[str]], MemoryStore] = OrderedDict()
_SHARED_LOCK = threading.Lock()
SHARED_STORES = 4


def shared_store(uri: str, settings: Settings) -> MemoryStore:
    """The store at ``uri`` (empty: the settings' URI) opened with ``settings``, opened once per process.

    A store opened earlier is checked before it is handed out again (:meth:`ShardedEngine.check_layout`, one read
    of ``meta``): after a re-shard, or with the store gone, it is dropped and opened afresh, which raises what
    an open raises (the new shard count against ``ENGRAM_SHARDS``, a migration under way). Reads are strongly
    consistent, so a kept store sees every other process's commits.
    """
    key = (uri or settings.resolved_db_uri, settings, settings.explicit)
    with _SHARED_LOCK:
        store = _SHARED.get(key)
        if store is not None:
            try:
                store.engine.check_layout()
            except Exception:  # noqa: BLE001 - whatever it is, a fresh open says it properly
                store = None
                del _SHARED[key]
        if store is None:
            store = MemoryStore.open(uri or None, settings=settings)
            _SHARED[key] = store
            while len(_SHARED) > SHARED_STORES:
                _SHARED.popitem(last=False)
        _SHARED.move_to_end(key)
        return store


class RunScopedIOManager(ConfigurableIOManager):
    """Hands an asset's value to the assets downstream of it **in the same run**, and to no other run.

    Keeps the latest value per asset and agent as ``<base_dir>/run_scoped/<asset>/<agent>.pickle`` tagged with
    the run that computed it; loading in any other run returns ``None`` (the consumer computes its own).
    """

    base_dir: str = Field(default="", description="empty: the instance's storage directory")

    def _path(self, context: InputContext | OutputContext) -> Path:
        base = Path(self.base_dir or context.step_context.instance.storage_directory())
        # The agent id is user input: quote it into one safe file name.
        name = quote(context.asset_partition_key, safe="") or "_"
        return base.joinpath("run_scoped", *context.asset_key.path, f"{name}.pickle")

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        path = self._path(context)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{context.run_id}.tmp")
        with tmp.open("wb") as fh:
            pickle.dump((context.run_id, obj), fh, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(path)  # atomic: a reader never sees half a value
        context.add_output_metadata({"path": MetadataValue.path(str(path))})

    def load_input(self, context: InputContext) -> Any:
        path = self._path(context)
        if not path.exists():
            return None
        with path.open("rb") as fh:
            produced_by, obj = pickle.load(fh)
        if produced_by != context.step_context.run_id:
            context.log.info(f"{context.asset_key.to_user_string()} is from run {produced_by}: recomputed")
            return None
        return obj


def engram_resources(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The resources of the code location: the store's variables set in ``env`` (default ``os.environ``) are
    bound as ``EnvVar``, read again by each process that starts the resource (see the module docstring)."""
    settings = Settings.from_env(env)  # validated here: a bad or missing required variable fails the load

    def bound(name: str) -> Any:
        return EnvVar(name) if name in settings.explicit else ""

    return {
        "engram": EngramStore(uri=bound("ENGRAM_DB_URI"), embedder=bound("ENGRAM_EMBEDDER")),
        "run_scoped_io_manager": RunScopedIOManager(),
    }
