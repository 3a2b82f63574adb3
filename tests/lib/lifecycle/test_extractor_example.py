"""The worked example of docs/consolidation.md runs as written: a plugged extractor adds a relation."""

from __future__ import annotations

import re
from pathlib import Path

from engram_pipeline.store import MemoryStore

DOC = Path(__file__).resolve().parents[3] / "docs" / "consolidation.md"


def example_code() -> str:
    text = DOC.read_text(encoding="utf-8").split("## Plugging in a model", 1)[1]
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_the_documented_extractor_derives_a_belief_the_parser_cannot(store: MemoryStore) -> None:
    for text in ("Kim: I don't drink coffee anymore.", "Session 5: Kim said she doesn't drink coffee"):
        store.remember("kim", text, kind="episodic")
    scope: dict = {"store": store}
    exec(compile(example_code(), str(DOC), "exec"), scope)  # noqa: S102 (the documented example, verbatim)
    assert scope["report"].beliefs_created == 1
    [belief] = [r for r in store.list_memories("kim", kind="semantic") if r["source"] == "derived"]
    assert belief["content"] == "Kim does not drink coffee."
