"""The store refuses object storage that ignores put-if-absent, and opens on one that honours it (Ceph RGW)."""

from __future__ import annotations

import pytest

from deploy.local_cluster import Cluster, free_port
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from engram_pipeline.store.object_store import (
    PROBE_PREFIX,
    ConditionalPutIgnored,
    ObjectStoreCheckFailed,
    check_conditional_put,
)
from tests.deploy.fake_s3 import fake_s3

pytestmark = pytest.mark.integration

HASHING = Settings.from_env({"ENGRAM_EMBEDDER": "hashing"})


def test_an_endpoint_that_ignores_if_none_match_is_refused_and_nothing_is_written() -> None:
    with fake_s3(honour=False) as fake:
        with pytest.raises(ConditionalPutIgnored, match="accepted a second conditional PUT"):
            MemoryStore.open("s3://bucket/store", settings=HASHING, storage_options=fake.storage_options)
        puts = [(path, condition) for method, path, condition in fake.requests if method == "PUT"]
        assert len(puts) == 2 and all(condition == "*" for _, condition in puts), fake.requests
        assert all(path.startswith(f"/bucket/store/{PROBE_PREFIX}/") for path, _ in puts)
        assert fake.objects == {}  # the probe is deleted; no table was created


def test_the_check_runs_once_per_endpoint_in_a_process() -> None:
    with fake_s3(honour=True) as fake:
        check_conditional_put("s3://bucket/a", fake.storage_options)
        check_conditional_put("s3://bucket/b", fake.storage_options)  # same bucket and options: cached
        assert [m for m, _, _ in fake.requests] == ["PUT", "PUT", "DELETE"]
        assert fake.objects == {}


def test_an_unreachable_endpoint_fails_with_a_clear_error() -> None:
    options = {"aws_endpoint": f"http://127.0.0.1:{free_port()}", "aws_region": "us-east-1", "allow_http": "true"}
    options |= {"aws_access_key_id": "x", "aws_secret_access_key": "x"}
    with pytest.raises(ObjectStoreCheckFailed, match="ENGRAM_STORAGE_OPTIONS"):
        MemoryStore.open("s3://bucket/store", settings=HASHING, storage_options=options)


@pytest.mark.distributed
def test_ceph_rgw_honours_it_and_the_store_opens(cluster: Cluster, s3_uri: str) -> None:
    store = MemoryStore.open(s3_uri, settings=HASHING, storage_options=cluster.storage_options)
    written = store.remember("alice", "User prefers dark mode")
    reopened = MemoryStore.open(s3_uri, settings=HASHING, storage_options=cluster.storage_options)
    assert reopened.get(written.memory["id"], track_access=False)["content"] == "User prefers dark mode"
