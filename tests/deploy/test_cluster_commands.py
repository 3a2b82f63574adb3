"""``make cluster`` / ``make cluster-down`` (``python -m deploy.local_cluster up|down``) as a developer runs them:
``up`` twice leaves the first cluster and its ``cluster.json`` alone, and ``down`` stops every process ``up``
started, and nothing else.

Real processes, but stand-ins for the services: each ``up`` and ``down`` is a process of its own (the services
outlive ``up``, as after ``make cluster``), started through a driver that replaces the three start steps with
``sleep`` run under the services' program names. The same commands against the real cluster are in
``test_local_cluster.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

PROJECT = Path(__file__).resolve().parents[2]
SERVICES = ("redis", "postgres", "ceph-mon", "ceph-mgr", "ceph-osd", "radosgw")
DRIVER = """
import sys
from pathlib import Path
import deploy.local_cluster as lc

BIN = Path(sys.argv[1])

def stand_in(name):
    def start(self):
        self.ports.setdefault(name, lc.free_port())
        with open(BIN / "spawned", "a") as log:
            log.write(name + "\\n")
        self._started(name, lc._spawn([str(BIN / name), "600"], self.root / f"{name}.log"))
    return start

def start_ceph(self):
    for name in ("ceph-mon", "ceph-mgr", "ceph-osd", "radosgw"):
        stand_in(name)(self)
    self.ports.setdefault("rgw", self.ports["radosgw"])

lc.missing_binaries = lambda: []
lc.Cluster._start_redis = stand_in("redis")
lc.Cluster._start_postgres = stand_in("postgres")
lc.Cluster._start_ceph = start_ceph
sys.exit(lc.main(sys.argv[2:]))
"""


@pytest.fixture
def cluster_cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in SERVICES:
        (bin_dir / name).symlink_to(shutil.which("sleep") or "/bin/sleep")
    (tmp_path / "driver.py").write_text(DRIVER)
    root = tmp_path / "cluster"

    def run(command: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(tmp_path / "driver.py"), str(bin_dir), command, "--dir", str(root)]
        env = {**os.environ, "PYTHONPATH": str(PROJECT)}
        return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)

    yield run, root, bin_dir
    if (root / "cluster.json").exists():  # whatever a failed assertion left running
        run("down")


def alive(pids: dict[str, int]) -> set[str]:
    def live(pid: int) -> bool:  # there, and not a zombie
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    return {name for name, pid in pids.items() if live(pid)}


def gone_soon(pids: dict[str, int], timeout: float = 20) -> set[str]:
    deadline = time.monotonic() + timeout
    while (left := alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_up_twice_keeps_the_first_cluster_and_down_stops_it(cluster_cli) -> None:  # type: ignore[no-untyped-def]
    run, root, bin_dir = cluster_cli
    first = run("up")
    assert first.returncode == 0, first.stderr
    recorded = (root / "cluster.json").read_bytes()
    pids = json.loads(recorded)["pids"]
    assert set(pids) == set(SERVICES) and alive(pids) == set(SERVICES)

    again = run("up")
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert again.stdout.startswith("# already running")
    exports = [line for line in first.stdout.splitlines() if line.startswith("export ")]
    assert [line for line in again.stdout.splitlines() if line.startswith("export ")] == exports
    assert (root / "cluster.json").read_bytes() == recorded  # it was overwritten with a second cluster's
    assert (bin_dir / "spawned").read_text().split() == list(SERVICES)  # nothing started twice
    assert alive(pids) == set(SERVICES)

    down = run("down")
    assert down.returncode == 0, down.stderr
    assert gone_soon(pids) == set()  # six services were left running
    assert run("down").returncode == 0  # nothing left to stop is not an error


def test_up_on_a_partly_running_cluster_says_so_and_starts_nothing(cluster_cli) -> None:  # type: ignore[no-untyped-def]
    run, root, bin_dir = cluster_cli
    assert run("up").returncode == 0
    recorded = (root / "cluster.json").read_bytes()
    pids = json.loads(recorded)["pids"]
    os.kill(pids["ceph-osd"], 15)
    assert gone_soon({"ceph-osd": pids["ceph-osd"]}) == set()

    partly = run("up")
    assert partly.returncode == 1 and "Traceback" not in partly.stderr
    assert "only partly running (ceph-osd stopped)" in partly.stderr and "down" in partly.stderr
    assert (root / "cluster.json").read_bytes() == recorded
    assert run("down").returncode == 0 and gone_soon(pids) == set()

    # stopped, it starts again afresh
    assert run("up").returncode == 0
    assert alive(json.loads((root / "cluster.json").read_text())["pids"]) == set(SERVICES)


def test_down_leaves_a_process_that_reuses_a_recorded_pid_alone(cluster_cli) -> None:  # type: ignore[no-untyped-def]
    run, root, _ = cluster_cli
    assert run("up").returncode == 0
    state = json.loads((root / "cluster.json").read_text())
    assert run("down").returncode == 0 and gone_soon(state["pids"]) == set()
    # as after a reboot: the recorded PID of redis now belongs to some other process
    other = subprocess.Popen(["sleep", "600"])
    try:
        state["pids"]["redis"] = other.pid
        (root / "cluster.json").write_text(json.dumps(state))
        assert run("down").returncode == 0
        assert other.poll() is None, "down killed a process it did not start"
    finally:
        other.kill()
        other.wait()
