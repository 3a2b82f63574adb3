"""Generated blocks in the README and docs/ match their generator, so a table cannot drift from its source.

A block is written as::

    <!-- generated: engram_pipeline.embed.threshold_table() (any comment) -->
    ...the generator's output...
    <!-- end generated -->

and this test calls the named function and compares. To refresh one, paste the function's output.
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


def test_the_threshold_table_is_generated() -> None:
    assert any(m.group(2) == "threshold_table" for _, m in BLOCKS)


@pytest.mark.parametrize(("path", "match"), BLOCKS, ids=[f"{p.name}:{m.group(2)}" for p, m in BLOCKS])
def test_generated_block_matches_its_generator(path: Path, match: re.Match[str]) -> None:
    module, function, text = match.groups()
    expected = getattr(importlib.import_module(module), function)().strip()
    assert text.strip() == expected, (
        f"{path.name}: the block from {module}.{function}() is stale; it should read:\n{expected}"
    )
