"""The store resource reads the environment of the process that runs it, and a deployment refuses a worker with
no store configured instead of letting it open a local one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance, EnvVar, materialize

from assets.instance import prepare_environment
from assets.maintenance_assets import stm_promotion
from assets.resources import engram_resources
from engram_pipeline.settings import Settings, SettingsError
from engram_pipeline.store import MemoryStore

ROOT = Path(__file__).resolve().parents[2]


def test_the_store_variables_are_bound_as_env_vars_and_left_empty_when_unset() -> None:
    bound = engram_resources({"ENGRAM_DB_URI": "s3://bucket/store", "ENGRAM_EMBEDDER": "hashing"})["engram"]
    assert isinstance(bound.uri, EnvVar) and bound.uri.env_var_name == "ENGRAM_DB_URI"
    assert isinstance(bound.embedder, EnvVar) and bound.embedder.env_var_name == "ENGRAM_EMBEDDER"
    laptop = engram_resources({})["engram"]  # make demo / make ui: <ENGRAM_HOME>/lancedb of the running process
    assert (laptop.uri, laptop.embedder) == ("", "")


def test_a_run_opens_the_store_of_its_own_environment(
    seeded: MemoryStore, seeded_uri: str, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loaded where ENGRAM_DB_URI named another store; the run's process names the seeded one.
    resources = engram_resources({"ENGRAM_DB_URI": "/elsewhere/store", "ENGRAM_EMBEDDER": "hashing"})
    monkeypatch.setenv("ENGRAM_DB_URI", seeded_uri)
    monkeypatch.setenv("ENGRAM_EMBEDDER", "hashing")
    agent = seeded.agents()[0]
    result = materialize([stm_promotion], partition_key=agent, resources=resources, instance=instance)
    assert result.success
    assert not Path("/elsewhere/store").exists()
    monkeypatch.delenv("ENGRAM_DB_URI")  # a worker without the variable fails instead of opening a local store
    with pytest.raises(Exception, match="ENGRAM_DB_URI"):
        materialize([stm_promotion], partition_key=agent, resources=resources, instance=instance)


def test_a_deployment_refuses_a_process_without_a_store_uri(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="ENGRAM_REQUIRE_DB_URI is set but ENGRAM_DB_URI is not"):
        Settings.from_env({"ENGRAM_REQUIRE_DB_URI": "1"})
    assert Settings.from_env({"ENGRAM_REQUIRE_DB_URI": "1", "ENGRAM_DB_URI": "s3://b/s"}).require_db_uri
    env = {k: v for k, v in os.environ.items() if k != "ENGRAM_DB_URI"}
    env.update(ENGRAM_REQUIRE_DB_URI="1", ENGRAM_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    worker = subprocess.run(
        [sys.executable, "-c", "import assets.definitions"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert worker.returncode != 0 and "ENGRAM_DB_URI is not" in worker.stderr
    assert not (tmp_path / "home").exists()  # no local store was made


def test_a_relative_store_path_is_made_absolute_for_every_process(tmp_path: Path) -> None:
    env = {"ENGRAM_HOME": str(tmp_path / "home"), "ENGRAM_DB_URI": "rel/store"}
    prepare_environment(env)
    assert env["ENGRAM_DB_URI"] == str(Path("rel/store").resolve())
    s3 = {"ENGRAM_HOME": str(tmp_path / "home"), "ENGRAM_DB_URI": "s3://bucket/store"}
    prepare_environment(s3)
    assert s3["ENGRAM_DB_URI"] == "s3://bucket/store"
