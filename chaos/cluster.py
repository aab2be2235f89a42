"""The processes under test: a private redis-server and the real daemons (docs/reliability.md).

The harness never touches a shared Redis: it starts its own ``redis-server`` on a free
port (no persistence) and points every daemon's REDIS_URL at it, so FLUSHALL and a
stop/restart disturb nobody. Daemons are ``manage.py`` subprocesses, each in its own
session (as under a process manager), with their output in a log file per process.
"""

import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from django.conf import settings
from django.db import connections
from django.test import override_settings

from chaos.handlers import EXEC_LOG_ENV

ROOT = Path(__file__).resolve().parent.parent
# Debian's libfaketime (package faketime); FAKETIME_LIB names another build.
FAKETIME_LIB = os.environ.get(
    "FAKETIME_LIB", f"/usr/lib/{platform.machine()}-linux-gnu/faketime/libfaketime.so.1")

# Tunables every daemon gets (docs/reliability.md, "Tunables"): a short lease so a dead
# worker's runs come back within seconds, and a short partition lease so a killed
# scheduler's partitions move on quickly. Everything else keeps its default.
CHAOS_TUNABLES = {
    "LEASE_TTL_S": "4",
    "PARTITION_TTL_S": "5",
    "RECONCILE_INTERVAL_S": "5",
    "REDIS_PREFIX": "chaos",
}


class ClusterError(Exception):
    """The harness could not set up the processes under test (message says which)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url(alias: str = "default") -> str:
    """The PostgreSQL URL behind database alias ``alias``, for the daemons; a host list
    with its target_session_attrs when the alias names several hosts (docs/scaling.md,
    "Failover"). Raises ClusterError if it is not PostgreSQL (the harness restarts and
    measures it)."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        raise ClusterError(f"the chaos harness needs PostgreSQL; {alias!r} is {connection.vendor}")
    params = connection.settings_dict
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    hosts = str(params.get("HOST") or "127.0.0.1").split(",")
    ports = str(params.get("PORT") or 5432).split(",")
    netloc = ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=True))
    attrs = (params.get("OPTIONS") or {}).get("target_session_attrs")
    query = f"?target_session_attrs={attrs}" if attrs else ""
    return f"postgres://{user}{password}@{netloc}/{params['NAME']}{query}"


class RedisServer:
    """A private ``redis-server`` child on a free port, without persistence."""

    def __init__(self, workdir: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            raise ClusterError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def start(self, timeout: float = 10) -> None:
        """Start the server and wait until it answers PING (ClusterError on timeout)."""
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", str(self.workdir)]
        with open(self.workdir / "redis.log", "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.client().ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise ClusterError(f"redis-server on port {self.port} did not answer within {timeout} s")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); its data is gone."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def broker_of(server: "RedisServer", tunables: dict | None = None):
    """Within the block, this process's broker (the pushes ``create_jobs`` makes after
    commit) is the private Redis ``server`` with the daemons' key prefix, never the Redis
    of settings; ``tunables`` (SCHEDULER keys, e.g. {"SHARDS": 8}) are set as the
    scenario's daemons have them. Broker instances are cached per process by
    ``runs.brokers.get_broker``, so the cache is emptied on the way in and restored on the
    way out."""
    from runs import brokers

    saved = dict(brokers._instances)
    brokers._instances.clear()
    scheduler = {**(getattr(settings, "SCHEDULER", None) or {}), "BROKER": "redis",
                 "REDIS_PREFIX": CHAOS_TUNABLES["REDIS_PREFIX"], **(tunables or {})}
    try:
        with override_settings(REDIS_URL=server.url, SCHEDULER=scheduler):
            yield
    finally:
        brokers._instances.clear()
        brokers._instances.update(saved)


@dataclass
class Daemon:
    """One daemon process the harness owns. ``expected_exit`` is set when the harness
    itself stopped or killed it, so an unexpected death can be told apart."""

    name: str
    args: list[str]
    env: dict
    log_path: Path
    proc: subprocess.Popen | None = None
    expected_exit: bool = False
    keep_down: bool = False  # stopped for good: ensure_up leaves it alone
    restarts: int = 0
    unexpected_exits: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    """The daemons of one scenario, sharing one database, one private Redis and one
    execution log. ``extra_env`` is added to every daemon's environment."""

    def __init__(self, workdir: Path, using: str = "default", extra_env: dict | None = None,
                 redis_server=None):
        self.workdir = workdir
        # A RedisServer, or anything with its url, start() and stop() (a Redis Cluster).
        self.redis = redis_server or RedisServer(workdir)
        self.exec_log = workdir / "exec.log"
        self.daemons: dict[str, Daemon] = {}
        self.base_env = dict(os.environ)
        self.base_env.update({
            "DJANGO_SETTINGS_MODULE": "scheduler_project.settings_chaos",
            "DATABASE_URL": database_url(using),
            "SCHEDULER_BROKER": "redis",
            EXEC_LOG_ENV: str(self.exec_log),
            "PYTHONUNBUFFERED": "1",
        })
        self.base_env.update({f"SCHEDULER_{k}": v for k, v in CHAOS_TUNABLES.items()})
        # With DEBUG off the daemons and gunicorn refuse the development key and an empty
        # ALLOWED_HOSTS (docs/security.md); a cluster of its own gets a key of its own.
        self.base_env.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
        self.base_env.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
        self.base_env.update(extra_env or {})

    def start_redis(self) -> None:
        self.redis.start()
        self.base_env["REDIS_URL"] = self.redis.url

    # --- daemons ----------------------------------------------------------------------

    def add(self, name: str, args: list[str], skew: str | None = None,
            start: bool = True) -> Daemon:
        """Register daemon ``name`` running ``manage.py <args>`` (or ``python -m ...`` when
        ``args`` starts with "-m"); ``skew`` (e.g. "+5m")
        runs it under libfaketime with its wall clock shifted by that much."""
        env = dict(self.base_env)
        if skew:
            if not os.path.exists(FAKETIME_LIB):
                raise ClusterError(f"{FAKETIME_LIB} is missing (apt-get install -y faketime)")
            # libfaketime shifts the monotonic clock too: with it left real, Python 3.12's
            # time.sleep (clock_nanosleep on an absolute monotonic deadline) fails EINVAL.
            env.update({"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": skew})
        daemon = Daemon(name, args, env, self.workdir / f"{name}.log")
        self.daemons[name] = daemon
        if start:
            self.start(daemon)
        return daemon

    def start(self, daemon: Daemon) -> None:
        # "-m module ..." runs a module (gunicorn); anything else is a manage.py command.
        if daemon.args[0] == "-m":
            argv = [sys.executable, *daemon.args]
        else:
            argv = [sys.executable, str(ROOT / "manage.py"), *daemon.args]
        with open(daemon.log_path, "ab") as out:
            daemon.proc = subprocess.Popen(argv, env=daemon.env, stdout=out,
                                           stderr=subprocess.STDOUT, cwd=ROOT,
                                           start_new_session=True)
        daemon.expected_exit = False

    def of_kind(self, kind: str) -> list[Daemon]:
        """Daemons whose name starts with ``kind`` ("worker", "scheduler", ...)."""
        return [d for name, d in sorted(self.daemons.items()) if name.startswith(kind)]

    def kill(self, daemon: Daemon, sig: int = signal.SIGKILL, group: bool = False) -> None:
        """Send ``sig`` to the daemon (or to its whole process group, children included)."""
        if sig in (signal.SIGKILL, signal.SIGTERM):
            daemon.expected_exit = True
        if group:
            os.killpg(daemon.pid, sig)
        else:
            daemon.proc.send_signal(sig)

    def restart(self, daemon: Daemon) -> None:
        """Reap the daemon if it ended, then start it again (a new pid)."""
        if daemon.alive():
            raise ClusterError(f"{daemon.name} is still running")
        daemon.proc.wait()
        daemon.restarts += 1
        self.start(daemon)

    def ensure_up(self) -> list[str]:
        """Restart every daemon that is not running; returns the names of those that had
        died without the harness asking (crashes), recording their exit codes."""
        crashed = []
        for daemon in self.daemons.values():
            if daemon.alive() or daemon.keep_down:
                continue
            code = daemon.proc.wait()
            if not daemon.expected_exit:
                daemon.unexpected_exits.append(code)
                crashed.append(daemon.name)
            self.restart(daemon)
        return crashed

    def stop(self, daemons: list[Daemon], timeout: float = 30) -> dict[str, int]:
        """SIGTERM ``daemons`` and wait (SIGKILL the group after ``timeout`` s); returns
        each one's exit code. They stay down: ``ensure_up`` no longer restarts them."""
        for daemon in daemons:
            daemon.keep_down = True
            if daemon.alive():
                self.kill(daemon, signal.SIGTERM)
            else:
                daemon.expected_exit = True
        codes = {}
        deadline = time.monotonic() + timeout
        for daemon in daemons:
            try:
                codes[daemon.name] = daemon.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                codes[daemon.name] = daemon.proc.wait()
        return codes

    def close(self) -> None:
        """Stop every daemon (SIGTERM, then SIGKILL of the group) and the Redis server."""
        try:
            self.stop([d for d in self.daemons.values() if d.proc is not None], timeout=20)
        finally:
            for daemon in self.daemons.values():
                if daemon.proc is not None and daemon.proc.poll() is None:
                    os.killpg(daemon.pid, signal.SIGKILL)
                    daemon.proc.wait()
            self.redis.stop()

    def rss_kib(self) -> dict[str, int]:
        """Resident memory (VmRSS, KiB) of each live daemon process and its children."""
        sizes = {}
        for name, daemon in self.daemons.items():
            if daemon.alive():
                sizes[name] = sum(_rss(pid) for pid in [daemon.pid, *_children(daemon.pid)])
        return sizes


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(p) for p in children.read().split()]
    except OSError:
        return []
