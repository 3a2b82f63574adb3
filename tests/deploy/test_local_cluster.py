"""The local cluster's recipe has one package list: the install script CI runs installs what it starts from."""

from __future__ import annotations

import re
from pathlib import Path

from deploy.local_cluster import DEBIAN_PACKAGES

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_cluster.sh"


def test_the_install_script_installs_the_clusters_packages() -> None:
    listed = re.search(r'^PACKAGES="([^"]+)"$', SCRIPT.read_text(), re.M)
    assert listed and tuple(listed.group(1).split()) == DEBIAN_PACKAGES
