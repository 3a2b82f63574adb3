"""Generated blocks in the README and docs/ match their generator, so a table cannot drift from its source.

A block is written as::

    <!-- generated: engram_pipeline.embed.threshold_table() (any comment) -->
    ...the generator's output...
    <!-- end generated -->

and this test calls the named function and compares. To refresh every block in place, run
``python tests/docs/test_generated_tables.py``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- generated: ([\w.]+)\.(\w+)\(\)[^>]*-->\n(.*?)\n<!-- end generated -->", re.S)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [(path, m) for path in DOCS for m in BLOCK.finditer(path.read_text())]


def test_the_threshold_and_variable_tables_are_generated() -> None:
    assert {"threshold_table", "env_table"} <= {m.group(2) for _, m in BLOCKS}


@pytest.mark.parametrize(("path", "match"), BLOCKS, ids=[f"{p.name}:{m.group(2)}" for p, m in BLOCKS])
def test_generated_block_matches_its_generator(path: Path, match: re.Match[str]) -> None:
    module, function, text = match.groups()
    expected = getattr(importlib.import_module(module), function)().strip()
    assert text.strip() == expected, (
        f"{path.name}: the block from {module}.{function}() is stale; it should read:\n{expected}"
    )


def refresh() -> None:
    """Rewrite every generated block from its generator."""
    for path in DOCS:
        text = path.read_text()

        def fill(m: re.Match[str]) -> str:
            module, function = m.group(1), m.group(2)
            body = getattr(importlib.import_module(module), function)().strip()
            head = m.group(0).split("\n", 1)[0]
            return f"{head}\n{body}\n<!-- end generated -->"

        path.write_text(BLOCK.sub(fill, text))


if __name__ == "__main__":
    refresh()
