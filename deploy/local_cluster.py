"""A throwaway single-node cluster on 127.0.0.1 for the distributed profile: Postgres, Redis and a Ceph RGW.

One place for the recipe: ``make cluster`` (a developer), ``tests/deploy`` (CI) and ``docs/deploy.md`` all use it.
Every service runs from Debian's packages (``postgresql``, ``redis-server``, ``ceph-mon ceph-osd ceph-mgr
radosgw``) under one directory, listens on a free loopback port, and is stopped by the PIDs it wrote (with each
process's start time, so that a PID reused by another process is left alone). ``up`` on a directory whose
cluster is running leaves it as it is and prints its environment again::

    python -m deploy.local_cluster up --dir /tmp/engram-cluster     # prints the environment to export
    python -m deploy.local_cluster down --dir /tmp/engram-cluster

The Ceph recipe (16.2, measured here): one mon, one mgr, one bluestore OSD on a sparse file, ``auth none`` with
every ``ms_*_mode = crc`` (otherwise radosgw cannot reach the mon: "get_initial_auth_request returned -13"), pool
size 1 and small pg counts, ``rgw frontends = beast endpoint=127.0.0.1:PORT tcp_nodelay=1``, one S3 user made
with ``radosgw-admin`` and one bucket, path-style addressing. Without ``tcp_nodelay=1`` beast leaves Nagle's
algorithm on: on a kept-alive connection a response's body waits for the client's delayed ACK of its headers,
and every GET or LIST took about 40 ms instead of 1.5 (HEAD, which has no body, 1.4 ms either way; measured
with obstore, which keeps connections alive, as LanceDB does: ``docs/scale.md``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import email.utils
import hashlib
import hmac
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ACCESS_KEY = "engram-local"
SECRET_KEY = "engram-local-secret"
BUCKET = "engram"
PG_USER = "engram"
PG_DB = "dagster"
# the Debian packages the cluster runs from (.ci/run installs them)
DEBIAN_PACKAGES = ("postgresql", "redis-server", "ceph-mon", "ceph-osd", "ceph-mgr", "radosgw")


class ClusterError(RuntimeError):
    """A service did not come up; the message names its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing_binaries() -> list[str]:
    """The programs the cluster needs that are not installed (empty: it can start)."""
    needed = ["redis-server", "ceph-mon", "ceph-osd", "ceph-mgr", "radosgw", "radosgw-admin", "monmaptool", "ceph"]
    missing = [name for name in needed if shutil.which(name) is None]
    if _pg_bin() is None:
        missing.append("initdb/pg_ctl (postgresql)")
    return missing


def _pg_bin() -> Path | None:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "pg_ctl").exists():
            return candidate
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), or None when there is no live
    process ``pid`` (a zombie counts as gone). A PID and its start time name one process: after a reboot or a
    wrap of PIDs the same number is another process, which ``down`` must leave alone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return None if fields[0] in ("Z", "X") else fields[19]


@dataclass
class Cluster:
    """The services of one cluster directory and how to reach them."""

    root: Path
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    pg_home: Path | None = None
    # when each recorded process started (process_start): with its PID, it names that process and no other
    started: dict[str, str] = field(default_factory=dict)
    # the processes this object spawned (kept so that they are waited for, not left to the garbage collector)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    # -- what clients need -----------------------------------------------------------------------------
    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['rgw']}"

    @property
    def storage_options(self) -> dict[str, str]:
        """LanceDB (object_store) options for the RGW: static keys, plain HTTP, path-style addressing."""
        return {
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "aws_endpoint": self.s3_endpoint,
            "aws_region": "us-east-1",
            "allow_http": "true",
            "aws_virtual_hosted_style_request": "false",
        }

    @property
    def postgres_url(self) -> str:
        return f"postgresql+psycopg2://{PG_USER}@127.0.0.1:{self.ports['postgres']}/{PG_DB}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['redis']}/0"

    def env(self, prefix: str = "store") -> dict[str, str]:
        """The environment every process of the deployment shares (see deploy/env.example)."""
        return {
            "ENGRAM_DB_URI": f"s3://{BUCKET}/{prefix}",
            "ENGRAM_STORAGE_OPTIONS": json.dumps(self.storage_options),
            "ENGRAM_REQUIRE_DB_URI": "1",
            "ENGRAM_PG_HOST": "127.0.0.1",
            "ENGRAM_PG_PORT": str(self.ports["postgres"]),
            "ENGRAM_PG_USER": PG_USER,
            "ENGRAM_PG_PASSWORD": "",  # trust authentication on loopback
            "ENGRAM_PG_DB": PG_DB,
            "ENGRAM_MAX_CONCURRENT_RUNS": "2",
            "ENGRAM_HEARTBEAT_TIMEOUT_S": "60",
            "ENGRAM_CELERY_BROKER": self.redis_url,
            "ENGRAM_CELERY_BACKEND": self.redis_url,
        }

    def save(self) -> None:
        state = {
            "ports": self.ports,
            "pids": self.pids,
            "started": self.started,
            "pg_home": str(self.pg_home) if self.pg_home else None,
        }
        (self.root / "cluster.json").write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, root: Path) -> Cluster:
        data = json.loads((root / "cluster.json").read_text())
        pg_home = Path(data["pg_home"]) if data.get("pg_home") else None
        return cls(root=root, ports=data["ports"], pids=data["pids"], pg_home=pg_home, started=data.get("started", {}))

    def running(self) -> dict[str, bool]:
        """Each recorded service: whether the process this cluster started is still there."""
        return {name: self._is_ours(name, pid) for name, pid in self.pids.items()}

    def _is_ours(self, name: str, pid: int) -> bool:
        now = process_start(pid)
        # a cluster.json written before start times were recorded: the PID alone
        return now is not None and self.started.get(name, now) == now

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> Cluster:
        """Start Postgres, Redis and Ceph (in that order); on any failure stop what started and raise."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            for name, step in (("redis", self._start_redis), ("postgres", self._start_postgres)):
                began = time.monotonic()
                step()
                self.timings[name] = round(time.monotonic() - began, 1)
                self.save()
            began = time.monotonic()
            self._start_ceph()
            self.timings["ceph"] = round(time.monotonic() - began, 1)
            self.save()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process this cluster started, by the PIDs it recorded (newest first)."""
        if "postgres" in self.pids and (pg := _pg_bin()) and self.pg_home:
            with contextlib.suppress(ClusterError, subprocess.SubprocessError, OSError):
                stop = [str(pg / "pg_ctl"), "-D", str(self.pg_home / "data"), "-m", "immediate", "-w", "stop"]
                _as_postgres(stop, timeout=30)
        for name, pid in reversed(list(self.pids.items())):
            if self._is_ours(name, pid):  # never a process that merely reuses a recorded PID
                terminate(pid)
            if (proc := self.procs.pop(name, None)) is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        self.pids.clear()
        self.started.clear()
        if self.pg_home and self.pg_home.parent != self.root:
            shutil.rmtree(self.pg_home, ignore_errors=True)  # a throwaway directory of its own (see _start_postgres)
        if (self.root / "cluster.json").exists():
            self.save()

    def _started(self, name: str, proc: subprocess.Popen[bytes] | None = None, *, pid: int | None = None) -> None:
        """Record a service's process at once, so that ``down`` finds it even if ``up`` dies before the end."""
        self.pids[name] = pid if proc is None else proc.pid
        if proc is not None:
            self.procs[name] = proc
        self.started[name] = process_start(self.pids[name]) or ""
        self.save()

    # -- redis ------------------------------------------------------------------------------------------
    def _start_redis(self) -> None:
        port = self.ports.setdefault("redis", free_port())
        log = self.root / "redis.log"
        proc = _spawn(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.root)],
            log,
        )  # fmt: skip
        self._started("redis", proc)
        _wait_port(port, "redis", log, proc)

    # -- postgres ---------------------------------------------------------------------------------------
    def _start_postgres(self) -> None:
        pg = _pg_bin()
        if pg is None:
            raise ClusterError("postgresql is not installed (apt-get install postgresql)")
        port = self.ports.setdefault("postgres", free_port())
        log = self.root / "postgres-setup.log"
        if self.pg_home is None:
            # As root, Postgres runs as the postgres user, who may not traverse the cluster directory (pytest's
            # temporary directories are 0700): its data then lives in a directory of its own under /tmp.
            self.pg_home = Path(tempfile.mkdtemp(prefix="engram-pg-")) if os.geteuid() == 0 else self.root / "postgres"
        home = self.pg_home
        data = home / "data"
        if not data.exists():
            home.mkdir(exist_ok=True)
            _chown_to_postgres(home)  # Postgres writes its data and its server log as the postgres user
            _as_postgres([str(pg / "initdb"), "-D", str(data), "-U", PG_USER, "--auth=trust", "-E", "UTF8"], log=log)
        options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        server_log = str(home / "server.log")
        _as_postgres([str(pg / "pg_ctl"), "-D", str(data), "-l", server_log, "-o", options, "-w", "start"], log=log)
        self._started("postgres", pid=int((data / "postmaster.pid").read_text().split()[0]))
        created = _as_postgres(
            [str(pg / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", PG_USER, "-d", "postgres", "-tAc",
             f"SELECT 1 FROM pg_database WHERE datname = '{PG_DB}'"],
            log=log,
        )  # fmt: skip
        if created.strip() != "1":
            _as_postgres([str(pg / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", PG_USER, PG_DB], log=log)

    # -- ceph -------------------------------------------------------------------------------------------
    @property
    def ceph_conf(self) -> Path:
        return self.root / "ceph" / "ceph.conf"

    def _ceph(self, *args: str, timeout: float = 60) -> str:
        out = subprocess.run(
            ["ceph", "-c", str(self.ceph_conf), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if out.returncode:
            raise ClusterError(f"ceph {' '.join(args)}: {out.stderr.strip()[-800:]}")
        return out.stdout

    def _start_ceph(self) -> None:
        base = self.root / "ceph"
        # Every start makes a new Ceph cluster (a new fsid): what an earlier one left here (its monmap, mon store
        # and OSD) cannot be reused, and monmaptool refuses to overwrite it. Its objects go with it.
        shutil.rmtree(base, ignore_errors=True)
        for sub in ("mon/ceph-a", "mgr/ceph-x", "osd/ceph-0", "run", "log", "rgw/ceph-rgw.a"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        mon_port = self.ports.setdefault("mon", free_port())
        rgw_port = self.ports.setdefault("rgw", free_port())
        fsid = str(uuid.uuid4())
        self.ceph_conf.write_text(_ceph_conf(base, fsid, mon_port, rgw_port))
        conf = ["-c", str(self.ceph_conf)]
        log = base / "log" / "setup.log"

        monmap = base / "monmap"
        _run(["monmaptool", "--create", "--fsid", fsid, "--addv", "a", f"[v2:127.0.0.1:{mon_port}]", str(monmap)], log)
        _run(["ceph-mon", *conf, "--mkfs", "-i", "a", "--monmap", str(monmap)], log)
        self._started("ceph-mon", _spawn(["ceph-mon", *conf, "-i", "a", "-f"], base / "log" / "mon.out"))
        _wait(lambda: self._ceph("mon", "stat", timeout=10), "ceph-mon", base / "log" / "mon.a.log", 60)

        self._started("ceph-mgr", _spawn(["ceph-mgr", *conf, "-i", "x", "-f"], base / "log" / "mgr.out"))

        osd_uuid = str(uuid.uuid4())
        osd_id = self._ceph("osd", "new", osd_uuid).strip()
        _run(["ceph-osd", *conf, "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid], log, timeout=120)
        self._started("ceph-osd", _spawn(["ceph-osd", *conf, "-i", osd_id, "-f"], base / "log" / "osd.out"))
        _wait(
            lambda: _expect("1 up", self._ceph("osd", "stat", timeout=10)), "ceph-osd", base / "log" / "osd.0.log", 120
        )

        self._started("radosgw", _spawn(["radosgw", *conf, "-n", "client.rgw.a", "-f"], base / "log" / "rgw.out"))
        _wait_port(rgw_port, "radosgw", base / "log" / "client.rgw.a.log", timeout=180)
        _run(
            ["radosgw-admin", *conf, "user", "create", "--uid", ACCESS_KEY, "--display-name", "engram",
             "--access-key", ACCESS_KEY, "--secret", SECRET_KEY],
            log, timeout=60,
        )  # fmt: skip
        _wait(lambda: _create_bucket(self.s3_endpoint, BUCKET), "the bucket", base / "log" / "client.rgw.a.log", 60)


def _ceph_conf(base: Path, fsid: str, mon_port: int, rgw_port: int) -> str:
    crc = "\n".join(
        f"ms_{kind}_mode = crc" for kind in ("cluster", "service", "client", "mon_cluster", "mon_service", "mon_client")
    )
    return f"""[global]
fsid = {fsid}
mon host = [v2:127.0.0.1:{mon_port}]
mon initial members = a
public network = 127.0.0.0/8
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
{crc}
ms bind msgr1 = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
run dir = {base}/run
admin socket = {base}/run/$name.asok
log file = {base}/log/$name.log
pid file = {base}/run/$name.pid
mon data = {base}/mon/$cluster-$id
mgr data = {base}/mgr/$cluster-$id
osd data = {base}/osd/$cluster-$id
keyring = /dev/null
osd objectstore = bluestore
bluestore block create = true
bluestore block size = 10737418240
bluestore fsck on mkfs = false
osd memory target = 939524096
bluestore cache autotune = false
bluestore cache size = 134217728
osd max object name len = 460
osd max object namespace len = 64
mgr initial modules =
[client.rgw.a]
rgw data = {base}/rgw/ceph-rgw.a
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw dns name = 127.0.0.1
rgw thread pool size = 64
"""


def _create_bucket(endpoint: str, bucket: str) -> None:
    """PUT the bucket, signed with AWS signature v2 (RGW accepts it; the store itself signs with v4)."""
    date = email.utils.formatdate(usegmt=True)
    digest = hmac.new(SECRET_KEY.encode(), f"PUT\n\n\n{date}\n/{bucket}".encode(), hashlib.sha1).digest()
    auth = f"AWS {ACCESS_KEY}:{base64.b64encode(digest).decode()}"
    resp = httpx.put(f"{endpoint}/{bucket}", headers={"Date": date, "Authorization": auth}, timeout=30)
    if resp.status_code not in (200, 409) and "BucketAlreadyOwnedByYou" not in resp.text:
        raise ClusterError(f"create bucket {bucket}: HTTP {resp.status_code} {resp.text[:300]}")


# -- processes -------------------------------------------------------------------------------------------
def _spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        # its own session: a Ctrl-C in the terminal that started the cluster does not reach the services
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def _run(cmd: list[str], log: Path, *, timeout: float = 60) -> None:
    with log.open("ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    if done.returncode:
        raise ClusterError(f"{cmd[0]} exited {done.returncode}: see {log}")


def _as_postgres(cmd: list[str], *, log: Path | None = None, timeout: float = 60) -> str:
    """Run a Postgres program as the ``postgres`` user when we are root (Postgres refuses to run as root)."""
    if os.geteuid() == 0:
        cmd = ["setpriv", f"--reuid={_postgres_uid()}", f"--regid={pwd.getpwnam('postgres').pw_gid}",
               "--init-groups", *cmd]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd="/")
    if log is not None:
        with log.open("a") as out:
            out.write(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    if done.returncode:
        program = Path(cmd[cmd.index("--init-groups") + 1] if "--init-groups" in cmd else cmd[0]).name
        raise ClusterError(f"{program} exited {done.returncode}: {done.stderr[-500:]}")
    return done.stdout


def _postgres_uid() -> int:
    try:
        return pwd.getpwnam("postgres").pw_uid
    except KeyError:
        raise ClusterError("no `postgres` user to run Postgres as (apt-get install postgresql)") from None


def _chown_to_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(path, entry.pw_uid, entry.pw_gid)


def terminate(pid: int, grace: float = 15) -> None:
    """SIGTERM ``pid`` (a process this cluster or its user started), SIGKILL it if still there after ``grace``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
            os.kill(pid, 0)  # raises ProcessLookupError once it is gone
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


def _expect(needle: str, text: str) -> None:
    if needle not in text:
        raise ClusterError(f"waiting for {needle!r}: {text.strip()[:200]}")


def _wait(probe: object, what: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            probe()  # type: ignore[operator]
            return
        except (ClusterError, httpx.HTTPError, subprocess.SubprocessError, OSError) as exc:
            last = exc
            time.sleep(0.5)
    raise ClusterError(f"{what} not up after {timeout:.0f} s ({last}); see {log}")


def _wait_port(
    port: int, what: str, log: Path, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30
) -> None:
    def probe() -> None:
        if proc is not None and proc.poll() is not None:
            raise ClusterError(f"{what} exited {proc.returncode}")
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass

    _wait(probe, what, log, timeout)


@contextlib.contextmanager
def running(root: Path) -> Iterator[Cluster]:
    """A started cluster under ``root``, stopped on exit."""
    cluster = Cluster(root).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local_cluster", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["up", "down", "env"])
    parser.add_argument("--dir", type=Path, default=Path(".engram/cluster"), help="where the services keep data")
    args = parser.parse_args(argv)
    root = args.dir.resolve()
    recorded = Cluster.load(root) if (root / "cluster.json").exists() else None
    up = {name for name, alive in recorded.running().items() if alive} if recorded else set()
    if args.command == "up":
        if recorded and up and up == set(recorded.pids):
            # `make cluster` twice: the first cluster stays as it is, cluster.json too
            print(f"# already running under {root}; stop with: python -m deploy.local_cluster down --dir {root}")
        elif up:
            gone = sorted(set(recorded.pids) - up) if recorded else []
            print(
                f"error: the cluster under {root} is only partly running ({', '.join(gone)} stopped): "
                f"stop the rest with `python -m deploy.local_cluster down --dir {root}` (make cluster-down), "
                "then start it again",
                file=sys.stderr,
            )
            return 1
        elif missing := missing_binaries():
            print(f"missing: {', '.join(missing)} (apt-get install {' '.join(DEBIAN_PACKAGES)})", file=sys.stderr)
            return 1
        else:
            try:
                cluster = Cluster(root).start()
            except ClusterError as exc:  # start() stopped what it had started
                print(f"error: {exc}", file=sys.stderr)
                return 1
            print(f"# started in {cluster.timings} s; stop with: python -m deploy.local_cluster down --dir {root}")
    elif args.command == "down":
        if recorded is None:
            print(f"# no cluster under {root}: nothing to stop")
            return 0
        recorded.stop()
        print(f"# stopped {', '.join(sorted(up)) or 'nothing (no recorded process was running)'}")
        return 0
    if not (root / "cluster.json").exists():
        print(
            f"error: no cluster under {root}: start one with `python -m deploy.local_cluster up --dir {root}`",
            file=sys.stderr,
        )
        return 1
    cluster = Cluster.load(root)
    for key, value in cluster.env().items():
        print(f"export {key}='{value}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
