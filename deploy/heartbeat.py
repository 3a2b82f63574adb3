"""A dead Celery worker fails its run: a heartbeat from the worker, and a run launcher that checks it.

Dagster's run monitoring asks the run launcher whether a started run's worker is alive. The stock
``CeleryRunLauncher`` answers from the task's state in the result backend, and a worker that is SIGKILLed (or
lost with its host, or OOM-killed) never writes another state: the task stays ``STARTED`` and so did the run,
for 11 minutes in the trial of issue 38, until a person terminated it. With ``task_acks_late`` the broker would
hand the task to another worker only after Redis's visibility timeout (an hour by default).

So each worker beats while it executes a run: this module, imported by every worker (``include`` in
``deploy/celery.yaml``), starts a thread when a run task starts that writes the Redis server's clock into
``engram:heartbeat:<task id>`` every :data:`BEAT_S` seconds, and deletes the key when the task ends.
:class:`HeartbeatCeleryRunLauncher` (``run_launcher`` in ``deploy/dagster.yaml``) answers run monitoring with
``FAILED`` once a started run's heartbeat is older than ``heartbeat_timeout_seconds`` (or has never come that
long after the run started), so the run is marked failed on the monitor's next poll and the instance's run
retries start it again; the passes resume from their cursors. Both sides read the Redis clock, so the hosts'
clocks do not matter. A worker that hangs without dying keeps beating: ``max_runtime_seconds`` is for that.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, cast

import redis
from celery.signals import task_postrun, task_prerun
from dagster import Field, IntSource
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun
from dagster._serdes import ConfigurableClassData
from dagster_celery.config import TASK_EXECUTE_JOB_NAME, TASK_RESUME_JOB_NAME
from dagster_celery.launcher import CeleryRunLauncher
from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG

BEAT_S = 5.0  # how often a busy worker beats; the launcher's timeout is a multiple of it
KEPT_S = 86_400  # a key outlives its worker by this much at most (a dead worker cannot delete it)
RUN_TASKS = (TASK_EXECUTE_JOB_NAME, TASK_RESUME_JOB_NAME)
log = logging.getLogger(__name__)


@functools.cache
def client_for(url: str) -> redis.Redis:
    """One client (and connection pool) per Redis URL in this process: the daemon checks every started run on each
    poll, and a worker beats every few seconds."""
    return redis.Redis.from_url(url)


def heartbeat_key(task_id: str) -> str:
    return f"engram:heartbeat:{task_id}"


def redis_now(client: redis.Redis) -> float:
    """The Redis server's clock, in seconds: the one clock every worker and the daemon share."""
    seconds, micros = client.time()
    return float(seconds) + float(micros) / 1e6


def beat(client: redis.Redis, task_id: str) -> None:
    client.set(heartbeat_key(task_id), repr(redis_now(client)), ex=KEPT_S)


def heartbeat_age(client: redis.Redis, task_id: str) -> float | None:
    """Seconds since the worker running ``task_id`` last beat; None if it never did (or the task ended)."""
    value = client.get(heartbeat_key(task_id))
    return None if value is None else redis_now(client) - float(value)


# -- the worker side: one beating thread per run task ----------------------------------------------------------
_beating: dict[str, threading.Event] = {}


def _beat_until(stop: threading.Event, url: str, task_id: str) -> None:
    client = client_for(url)
    while not stop.wait(BEAT_S):
        try:
            beat(client, task_id)
        except redis.RedisError:  # the broker is down too: nothing to tell anyone, try again next beat
            log.warning("heartbeat of task %s not written", task_id, exc_info=True)


@task_prerun.connect
def _start_beating(task_id: str, task: Any, **_: Any) -> None:
    if task.name not in RUN_TASKS:
        return
    url = str(task.app.conf.result_backend)
    beat(client_for(url), task_id)  # before the run's first step: the launcher never sees a gap
    stop = threading.Event()
    _beating[task_id] = stop
    threading.Thread(target=_beat_until, args=(stop, url, task_id), name=f"heartbeat-{task_id}", daemon=True).start()


@task_postrun.connect
def _stop_beating(task_id: str, task: Any, **_: Any) -> None:
    stop = _beating.pop(task_id, None)
    if stop is None:
        return
    stop.set()
    client_for(str(task.app.conf.result_backend)).delete(heartbeat_key(task_id))


# -- the daemon side --------------------------------------------------------------------------------------------
class HeartbeatCeleryRunLauncher(CeleryRunLauncher):
    """``CeleryRunLauncher`` whose health check also fails a started run whose worker stopped beating."""

    def __init__(self, *, heartbeat_timeout_seconds: int = 60, **kwargs: Any) -> None:
        if heartbeat_timeout_seconds < 2 * BEAT_S:
            raise ValueError(f"heartbeat_timeout_seconds must be at least {2 * BEAT_S:g} (two beats)")
        self.heartbeat_timeout_seconds = heartbeat_timeout_seconds
        super().__init__(**kwargs)

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {
            **cast(dict[str, Any], super().config_type()),
            "heartbeat_timeout_seconds": Field(
                IntSource,
                is_required=False,
                default_value=60,
                description="A started run whose worker has not beaten for this long is failed.",
            ),
        }

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]) -> Any:
        return cls(inst_data=inst_data, **config_value)

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        health = super().check_run_worker_health(run)
        if health.status != WorkerStatus.RUNNING:
            return health
        age = heartbeat_age(client_for(str(self.backend)), run.tags[DAGSTER_CELERY_TASK_ID_TAG])
        if age is None:
            record = self._instance.get_run_record_by_id(run.run_id)
            started = record.start_time if record and record.start_time else None
            if started is None or time.time() - started <= self.heartbeat_timeout_seconds:
                return health
            return CheckRunHealthResult(
                WorkerStatus.FAILED,
                f"no heartbeat from the Celery worker in the {time.time() - started:.0f} s since the run started "
                "(does the worker import deploy.heartbeat? see `include` in deploy/celery.yaml)",
            )
        if age > self.heartbeat_timeout_seconds:
            return CheckRunHealthResult(
                WorkerStatus.FAILED,
                f"the Celery worker's last heartbeat is {age:.0f} s old (limit {self.heartbeat_timeout_seconds} s): "
                "it died",
            )
        return health
