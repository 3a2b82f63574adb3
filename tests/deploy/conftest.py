"""The local cluster (Postgres, Redis, Ceph RGW on 127.0.0.1), started once per session and stopped at its end.

It is ``deploy/local_cluster.py``, the recipe a developer starts with ``make cluster``. In CI a missing Debian
package is a failure (``.ci/run`` installs them); elsewhere the tests that need the cluster are skipped, saying
which packages to install.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local_cluster import DEBIAN_PACKAGES, Cluster, missing_binaries


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if missing := missing_binaries():
        message = f"the local cluster needs {', '.join(missing)}: apt-get install {' '.join(DEBIAN_PACKAGES)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("cluster")
    running = Cluster(root).start()
    print(f"\nlocal cluster up in {running.timings} s (under {root})")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def s3_uri(cluster: Cluster) -> str:
    """A fresh store prefix in the cluster's bucket."""
    return f"s3://engram/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def cluster_env(cluster: Cluster, s3_uri: str, tmp_path: Path) -> dict[str, str]:
    """The environment of every process of the deployment, the store at ``s3_uri``."""
    prefix = s3_uri.removeprefix("s3://engram/")
    return {**cluster.env(prefix), "ENGRAM_EMBEDDER": "hashing", "ENGRAM_HOME": str(tmp_path / "home")}
