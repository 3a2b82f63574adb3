"""The package root: its public names are the documented ones, each the object its home module defines, loaded
on first use; the package is marked typed."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import engram_pipeline

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_is_the_object_of_its_home_module() -> None:
    assert engram_pipeline.__all__ == sorted(engram_pipeline._HOMES)
    for name, home in engram_pipeline._HOMES.items():
        assert getattr(engram_pipeline, name) is getattr(importlib.import_module(home), name), name
    assert set(engram_pipeline.__all__) <= set(dir(engram_pipeline))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        engram_pipeline.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_importing_the_package_loads_no_store_no_model_and_no_dagster() -> None:
    code = (
        "import sys, engram_pipeline\n"
        "heavy = [m for m in ('lancedb', 'polars', 'torch', 'dagster', 'engram_pipeline.store') if m in sys.modules]\n"
        "print(heavy)\n"
        "from engram_pipeline import MemoryStore\n"
        "print('lancedb' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[]", "True"]


def test_the_package_is_marked_typed() -> None:
    assert (ROOT / "engram_pipeline" / "py.typed").is_file()
    assert '"py.typed"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
