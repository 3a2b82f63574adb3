"""``.ci/run`` on a bare Debian machine: it installs make, python3 and python3-venv before it uses them.

The script runs for real with a ``PATH`` of stand-ins: ``apt-get`` and ``sh`` record how they were called (``sh``
then stops the script, so nothing is installed and no test runs), and ``make`` / ``python3`` are present or not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORD = '#!/bin/bash\necho "$(basename "$0") $*" >> "$CALLS"\n'


def _run_ci(tmp_path: Path, present: dict[str, str]) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "basename"):  # what the script and the stand-ins need from coreutils
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    stand_ins = {"apt-get": RECORD, "id": "#!/bin/bash\necho 0\n", "sh": RECORD + "exit 3\n", **present}
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    env = {"PATH": str(bin_dir), "CALLS": str(calls), "HOME": str(tmp_path)}
    done = subprocess.run(
        ["/bin/bash", str(REPO / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 3, done.stderr  # stopped by the stand-in `sh`, at the first install script
    return calls.read_text().splitlines()


def test_a_bare_machine_gets_make_python_and_venv_first(tmp_path: Path) -> None:
    calls = _run_ci(tmp_path, {})
    assert calls == [
        "apt-get update",
        "apt-get install -y --no-install-recommends make python3 python3-venv",
        "sh scripts/install_browser.sh",
    ]


def test_a_python_without_its_venv_module_gets_python3_venv(tmp_path: Path) -> None:
    no_ensurepip = "#!/bin/bash\nexit 1\n"  # Debian's python3 without python3-venv: `import ensurepip` fails
    calls = _run_ci(tmp_path, {"make": "#!/bin/bash\n", "python3": no_ensurepip})
    assert calls[:2] == ["apt-get update", "apt-get install -y --no-install-recommends python3-venv"]


def test_nothing_is_installed_when_everything_is_there(tmp_path: Path) -> None:
    calls = _run_ci(tmp_path, {"make": "#!/bin/bash\n", "python3": "#!/bin/bash\nexit 0\n"})
    assert calls == ["sh scripts/install_browser.sh"]
    assert os.access(REPO / ".ci" / "run", os.X_OK)
