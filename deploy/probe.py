"""``python -m deploy.probe broker``: exit 0 when the Celery broker (``ENGRAM_CELERY_BROKER``, Redis) answers a
PING within two seconds, 1 with the reason otherwise. The Celery workers' readiness and liveness probe in
``deploy/k8s/workers.yaml``: a worker with the solo pool runs a run in its main loop, so it cannot answer
Celery's own ``inspect ping`` while busy, and a probe that asked it would restart every busy worker.
"""

from __future__ import annotations

import os
import sys

import redis


def broker_answers(url: str) -> str | None:
    """None when the broker at ``url`` answers PING, else why not."""
    try:
        redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        return f"the broker at {url.split('@')[-1]} does not answer: {exc}"
    return None


def main(argv: list[str]) -> int:
    if argv != ["broker"]:
        print("usage: python -m deploy.probe broker", file=sys.stderr)
        return 2
    url = os.environ.get("ENGRAM_CELERY_BROKER")
    if not url:
        print("ENGRAM_CELERY_BROKER is not set", file=sys.stderr)
        return 1
    why = broker_answers(url)
    if why:
        print(why, file=sys.stderr)
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
