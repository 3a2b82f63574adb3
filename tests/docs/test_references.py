"""Every file the repository's text names in ``docs/``, ``tests/``, ``bench/``, the packages and the deploy and
training folders, or as a top-level ``NAME.md``, is in the repository (a moved test takes its mentions along).

A clone stands alone: the README once pointed to a ``DESIGN.md`` that only the project's shared folder has (the
repository ships ``docs/design.md``), and showed ``docs/img/review-veto.png``, which ``.gitignore`` kept out of
every clone. Tracked files are read (``git ls-files``), so an ignored file does not count as shipped.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# docs/<path>.md|png|svg, a file under one of the repository's folders, or a top-level NAME.md in capitals
# (README.md, DESIGN.md, CHANGELOG.md)
FOLDERS = "docs|tests|bench|engram_pipeline|assets|deploy|scripts|training"
FILE = r"\.(?:md|png|svg|py|json|jsonl|yaml|sh|toml)"
REFERENCE = re.compile(rf"(?<![\w/.-])((?:{FOLDERS})/[\w./-]+{FILE}|[A-Z][A-Z_]+\.md)\b")
TEXT = (".md", ".py", ".json", ".toml", ".yaml", ".sh", "Makefile", "run")


def _tracked() -> set[str]:
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip("not a git checkout")
    return set(done.stdout.splitlines())


def test_every_file_named_is_shipped() -> None:
    tracked = _tracked()
    this = Path(__file__).relative_to(ROOT).as_posix()
    missing = []
    for rel in sorted(tracked):
        if rel == this or not rel.endswith(TEXT) or not (ROOT / rel).is_file():
            continue
        for n, line in enumerate((ROOT / rel).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            missing += [f"{rel}:{n}: {name}" for name in REFERENCE.findall(line) if name not in tracked]
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)
