"""The ``>>>`` examples in the docstrings of the library, the code location and the shared corpora run, so they
cannot drift.

One test per module that carries an example; a failing example prints the doctest report (expected and got).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import assets
import engram_pipeline
from tests import corpora  # the corpora the tests and benchmarks share

ROOT = Path(__file__).resolve().parents[2]


def _modules_with_examples() -> list[str]:
    names = []
    for package in (engram_pipeline, assets, corpora):
        infos = [package.__name__, *(i.name for i in pkgutil.walk_packages(package.__path__, package.__name__ + "."))]
        for name in infos:
            spec = importlib.util.find_spec(name)
            if spec and spec.origin and spec.origin.endswith(".py") and ">>>" in Path(spec.origin).read_text():
                names.append(name)
    return sorted(names)


MODULES = _modules_with_examples()


def test_the_examples_are_found() -> None:
    assert len(MODULES) >= 20, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, verbose=False, report=True)
    assert result.attempted > 0, f"{name} has '>>>' text but no example doctest could run"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name} (report above)"
