"""Write the labelled multi-session dialogue corpus (``labelled.jsonl`` beside this file) from its generator,
:func:`tests.corpora.sessions.generate` (deterministic: the same file on every machine).

    python bench/data/sessions/generate.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # run from a checkout without installing
from tests.corpora.sessions import dump, generate  # noqa: E402

if __name__ == "__main__":
    (HERE / "labelled.jsonl").write_text(dump(generate()), encoding="utf-8")
