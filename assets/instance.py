"""Where the command-line entry points (``python -m assets.demo``, ``python -m assets.backfill``) find the
Dagster instance and the store.

Dagster refuses a relative ``DAGSTER_HOME``, and the code location's processes must agree on one store, so both
variables are made absolute here before anything opens the instance.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import MutableMapping
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def prepare_environment(env: MutableMapping[str, str] | None = None, *, dagster: bool = True) -> dict[str, str]:
    """Default ``ENGRAM_HOME`` (``./.engram``) and ``DAGSTER_HOME`` (``<ENGRAM_HOME>/dagster``), both made
    absolute (and a local ``ENGRAM_DB_URI`` too), so every Dagster process agrees and a relative
    ``DAGSTER_HOME=.engram/dagster`` works; give the instance the project's ``dagster.yaml`` if it has none
    (not with ``dagster=False``: a caller that runs no Dagster gets no instance directory). Returns the
    variables it set."""
    env = os.environ if env is None else env
    home = Path(env.get("ENGRAM_HOME") or ".engram").expanduser().resolve()
    dagster_home = Path(env.get("DAGSTER_HOME") or home / "dagster").expanduser().resolve()
    config = PROJECT_ROOT / "dagster.yaml"
    if dagster:
        dagster_home.mkdir(parents=True, exist_ok=True)
    if dagster and config.is_file() and not (dagster_home / "dagster.yaml").exists():
        shutil.copyfile(config, dagster_home / "dagster.yaml")
    values = {"ENGRAM_HOME": str(home), "DAGSTER_HOME": str(dagster_home)}
    uri = env.get("ENGRAM_DB_URI", "")
    if uri and "://" not in uri:  # each process resolves the store itself: a relative path must mean one place
        values["ENGRAM_DB_URI"] = str(Path(uri).expanduser().resolve())
    env.update(values)
    return values
