"""``python -m deploy.probe broker``, the Celery workers' probe in ``deploy/k8s/workers.yaml``, against a real
``redis-server`` this test starts on 127.0.0.1 (and stops): 0 while the broker answers, 1 with the reason once it
is gone or when the variable is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import redis

from deploy.local_cluster import DEBIAN_PACKAGES, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def probe(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deploy.probe", "broker"],
        env={**os.environ, "PYTHONPATH": ROOT, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_worker_probe_answers_for_the_broker() -> None:
    if shutil.which("redis-server") is None:
        message = f"needs redis-server: apt-get install {' '.join(DEBIAN_PACKAGES)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        up = probe({"ENGRAM_CELERY_BROKER": url})
        assert up.returncode == 0, up.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
    down = probe({"ENGRAM_CELERY_BROKER": url})
    assert down.returncode == 1 and "does not answer" in down.stderr, down.stderr
    unset = probe({"ENGRAM_CELERY_BROKER": ""})
    assert unset.returncode == 1 and "ENGRAM_CELERY_BROKER" in unset.stderr
