"""The local cluster's recipe has one package list: the install script CI runs installs what it starts from; and
``up`` on a running cluster leaves it alone (``test_cluster_commands.py`` has up/down with stand-in services)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deploy.local_cluster import DEBIAN_PACKAGES, Cluster, main

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_cluster.sh"


def test_the_install_script_installs_the_clusters_packages() -> None:
    listed = re.search(r'^PACKAGES="([^"]+)"$', SCRIPT.read_text(), re.M)
    assert listed and tuple(listed.group(1).split()) == DEBIAN_PACKAGES


@pytest.mark.distributed
def test_up_on_the_running_cluster_keeps_it(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """``make cluster`` a second time: the real services are recognised as running (by PID and start time),
    nothing starts, ``cluster.json`` is not rewritten, and the same environment is printed again."""
    assert cluster.running() == dict.fromkeys(cluster.pids, True)
    assert set(cluster.pids) == {"redis", "postgres", "ceph-mon", "ceph-mgr", "ceph-osd", "radosgw"}
    recorded = (cluster.root / "cluster.json").read_bytes()
    assert main(["up", "--dir", str(cluster.root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# already running")
    assert [line for line in out.splitlines() if line.startswith("export ")] == [
        f"export {key}='{value}'" for key, value in cluster.env().items()
    ]
    assert (cluster.root / "cluster.json").read_bytes() == recorded
    assert cluster.running() == dict.fromkeys(cluster.pids, True)
