"""Fixtures shared by the suite: real PostgreSQL, real SQLite, real Redis; no fakes."""

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone

from jobs.models import Job
from runs import brokers
from runs.brokers import get_broker
from runs.brokers.redis.wire import redis_client
from runs.models import Run
from tests import fast_flush

fast_flush.install()
ROOT = Path(__file__).resolve().parent.parent
# pair -> (broker name, database alias, Redis: "single", "cluster" or None)
PAIRS = {
    "redis": ("redis", "default", "single"),
    "database-postgresql": ("database", "default", None),
    "database-sqlite": ("database", "sqlite", None),
    "redis_cluster-postgresql": ("redis", "default", "cluster"),
}
BROKER_PAIRS = list(PAIRS)
ALL_DATABASES = ["default", "sqlite"]


def flush_redis() -> None:
    """Delete this run's keys (its prefix) from settings.REDIS_URL: the test Redis, or,
    in the cluster pair, every node of the cluster."""
    client = redis_client(settings.REDIS_URL)
    prefix = os.environ["SCHEDULER_REDIS_PREFIX"]
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)  # split by slot on a cluster


@pytest.fixture(scope="session")
def redis_cluster_url():
    """The URL of the test Redis Cluster: TEST_REDIS_CLUSTER_URL (scripts/test starts one),
    else a 3-master, 3-replica cluster this session starts on free ports and stops at its
    end, so the cluster pair never silently skips."""
    url = os.environ.get("TEST_REDIS_CLUSTER_URL")
    if url:
        yield url
        return
    from chaos.redis_cluster import RedisCluster

    cluster = RedisCluster().start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases; in the PgBouncer lane (DATABASE_POOLER=pgbouncer,
    docs/testing.md) also, before the test database is dropped, PgBouncer's server
    sessions to it closed through its admin console (KILL, then RESUME): PostgreSQL
    refuses to drop a database anyone is connected to."""
    yield
    if os.environ.get("DATABASE_POOLER") != "pgbouncer":
        return
    import psycopg

    with django_db_blocker.unblock():
        params = connections["default"].get_connection_params()
        connections.close_all()
    name = params.pop("dbname")
    admin = {k: params[k] for k in ("host", "port", "user", "password") if k in params}
    # The admin console speaks only the simple query protocol: client-side binding.
    with psycopg.connect(**admin, dbname="pgbouncer", autocommit=True,
                         cursor_factory=psycopg.ClientCursor) as console:
        console.execute(f"KILL {name}")
        console.execute(f"RESUME {name}")


@contextmanager
def redis_at(settings, url: str | None):
    """For the block, settings.REDIS_URL is ``url`` (None: unchanged) and get_broker()
    makes new brokers, so the code under test and daemon_env's daemons reach it."""
    saved = dict(brokers._instances)
    if url:
        settings.REDIS_URL = url
        brokers._instances.clear()
    try:
        yield
    finally:
        brokers._instances.clear()
        brokers._instances.update(saved)


@pytest.fixture(params=BROKER_PAIRS)
def broker(request, transactional_db, django_db_setup, settings):
    """Each broker/database pair of the contract: redis on PostgreSQL, the database broker
    on PostgreSQL, the database broker on SQLite, redis on a Redis Cluster with PostgreSQL.
    Data is committed (transactional), so separate processes see it. In the cluster pair
    settings.REDIS_URL is the cluster's for the test (redis_at)."""
    name, alias, kind = PAIRS[request.param]
    url = request.getfixturevalue("redis_cluster_url") if kind == "cluster" else None
    with redis_at(settings, url):
        flush_redis()
        chosen = get_broker(alias, name=name)
        yield chosen
        flush_redis()


@pytest.fixture(params=["redis", "redis_cluster"])
def redis_kind(request, settings):
    """Each kind of Redis the broker runs on: the test Redis, then the Redis Cluster, with
    settings.REDIS_URL pointing at it for the test (redis_at). Yields "redis" or
    "redis_cluster"."""
    url = request.getfixturevalue("redis_cluster_url") if request.param != "redis" else None
    with redis_at(settings, url):
        flush_redis()
        yield request.param
        flush_redis()


@pytest.fixture
def rb():
    """The Redis broker on the default database, with Redis emptied before and after. A
    cached broker forgets the shard list an earlier test made it see."""
    flush_redis()
    broker = get_broker("default", name="redis")
    broker._known_at = float("-inf")
    yield broker
    flush_redis()


def database_url(alias: str) -> str:
    """A URL for the test database behind ``alias`` (for daemon subprocesses)."""
    params = connections[alias].settings_dict
    if connections[alias].vendor == "sqlite":
        return f"sqlite:///{params['NAME']}"
    user = params.get("USER") or "postgres"
    host = params.get("HOST") or "127.0.0.1"
    port = params.get("PORT") or 5432
    return f"postgres://{user}@{host}:{port}/{params['NAME']}"


def daemon_env(broker_name: str = "redis", alias: str = "default", **tunables) -> dict:
    """Environment for a ``manage.py`` daemon subprocess that works on the test database
    and settings.REDIS_URL (the cluster's in the cluster pair). ``tunables`` become
    SCHEDULER_<NAME> variables."""
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "scheduler_project.settings_chaos",
        "DATABASE_URL": database_url(alias),
        "REDIS_URL": settings.REDIS_URL,
        "SCHEDULER_BROKER": broker_name,
        "SCHEDULER_REDIS_PREFIX": os.environ["SCHEDULER_REDIS_PREFIX"],
        "PYTHONUNBUFFERED": "1",
    })
    if alias == "default" and settings.DATABASE_LISTEN_URL:  # the PgBouncer lane
        env["DATABASE_LISTEN_URL"] = settings.DATABASE_LISTEN_URL
    env.update({f"SCHEDULER_{k.upper()}": str(v) for k, v in tunables.items()})
    return env


def start_daemon(args: list[str], env: dict, log_path: Path | None = None) -> subprocess.Popen:
    """Start ``manage.py <args>`` as a real process."""
    argv = [sys.executable, str(ROOT / "manage.py"), *args]
    # Own process group, as under a process manager, so a test can signal the group.
    if log_path is None:
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    with open(log_path, "wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)


def stop(*procs: subprocess.Popen, timeout: float = 30) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_until(predicate, timeout: float = 30, interval: float = 0.1, message: str = ""):
    """Poll ``predicate`` until it returns a truthy value; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {message or predicate}")


def make_runs(using: str, count: int, *, handler: str = "noop", payload=None, queue="default",
              priority: int = 5, delay_s: float = -1, max_attempts: int = 4,
              timeout_s: int = 60, shard: int = 0, owner=None) -> list[Run]:
    """One one-off job with ``count`` runs due ``delay_s`` from now (default: already due),
    created directly in database ``using`` with state ``scheduled``; the caller pushes.
    ``owner``: a user of database ``using`` (or None)."""
    now = timezone.now()
    job = Job.objects.using(using).create(
        name=f"{handler} x{count}", handler=handler, payload=payload or {}, queue=queue,
        priority=priority, run_at=now, timeout_s=timeout_s, max_attempts=max_attempts,
        owner=owner,
    )
    when = now + timedelta(seconds=delay_s)
    runs = [
        Run(job=job, scheduled_at=when + timedelta(microseconds=i), run_at=when,
            queue=queue, priority=priority, max_attempts=max_attempts, shard=shard)
        for i in range(count)
    ]
    runs = Run.objects.using(using).bulk_create(runs)
    if when < now:  # made in time, as the scheduler makes runs: lag counts from creation
        Run.objects.using(using).filter(pk__in=[r.pk for r in runs]).update(created_at=when)
        for run in runs:
            run.created_at = when
    return runs


@pytest.fixture
def alice():
    """A plain (non-staff) user, owner of the jobs an API test makes."""
    from django.contrib.auth.models import User

    return User.objects.create_user("alice")


@pytest.fixture
def api(alice):
    """An API client authenticated as ``alice`` with a token."""
    from tests.test_api_helpers import client_for

    return client_for(alice)


@pytest.fixture(autouse=True)
def fresh_throttles():
    """Throttle counts live in the Django cache, per client address: every test starts
    from none, so the anonymous requests of earlier tests (all from 127.0.0.1) are not
    counted against it."""
    from django.core.cache import cache
    cache.clear()


@pytest.fixture(autouse=True)
def fresh_flow_state():
    """Whether flow control is in use is remembered per process (runs/flow/control.py): a test
    that validated a keyed job left it on for every later test, and with it acks
    continued no run, so the child-ack and worker-log tests failed in a whole run."""
    yield
    from runs.flow import control as flow
    for alias in ("default", "sqlite"):
        flow.forget_cache(alias)
    flow.forget_use()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "postgresql_only(reason): the behaviour tested is PostgreSQL's own (row "
                   "locks, planner estimates); skipped when the default database is SQLite, "
                   "as tests/test_embedded_default.py runs the API tests")


# The files run on the Redis Cluster pair in the quick phase: the broker's own suites,
# which prove each broker operation on it (docs/testing.md, "The cluster pair").
CLUSTER_QUICK = frozenset({"test_broker_contract.py", "test_isolation.py",
                           "test_broker_fifo.py", "test_due_leases.py",
                           "test_redis_push.py"})
# Elsewhere, the files whose cluster instances run with the slow tests: measured, they
# reach the broker's Redis code where the files above do not (the wake, a workflow's
# acks and continuations, the flow gates, django.tasks); and the flow-control and
# django.tasks daemon tests, whose broker calls run in daemons, out of the measure's
# sight. Every other file's cluster instances are skipped unless
# TEST_EVERY_CLUSTER_PAIR=1.
CLUSTER_SLOW = frozenset({"test_worker_wake.py", "test_workflows_continuation.py",
                          "test_workflows_continuation_race.py",
                          "test_workflows_pause_requeue.py", "test_workflows_stale_stats.py",
                          "test_workflows_one_call_ack.py", "test_flow_limits.py",
                          "test_django_tasks.py", "test_flow_daemons.py",
                          "test_django_tasks_workers.py"})
EVERY_CLUSTER_PAIR = os.environ.get("TEST_EVERY_CLUSTER_PAIR") == "1"
# A renamed file would be skipped on the cluster without a word: the lists are checked.
_missing = sorted(name for name in CLUSTER_QUICK | CLUSTER_SLOW
                  if not (ROOT / "tests" / name).exists())
if _missing:
    raise RuntimeError(f"tests/conftest.py names test files that do not exist: {_missing}")
CLUSTER_PAIRS = frozenset(pair for pair, (_, _, redis_kind) in PAIRS.items()
                          if redis_kind == "cluster")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark slow every cluster-pair instance outside CLUSTER_QUICK, which keeps them out
    of the quick phase, and skip those outside CLUSTER_SLOW too unless
    TEST_EVERY_CLUSTER_PAIR=1 (before ``-m`` selects)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if (callspec is None or callspec.params.get("broker") not in CLUSTER_PAIRS
                or item.path.name in CLUSTER_QUICK):
            continue
        item.add_marker(pytest.mark.slow)
        if item.path.name not in CLUSTER_SLOW and not EVERY_CLUSTER_PAIR:
            item.add_marker(pytest.mark.skip(
                reason="the cluster pair's broker lines are the broker suites' and "
                       "CLUSTER_SLOW's (docs/testing.md, \"The cluster pair\")"))


def pytest_runtest_setup(item):
    marker = item.get_closest_marker("postgresql_only")
    if marker is not None and connections["default"].vendor != "postgresql":
        pytest.skip(f"PostgreSQL only: {marker.args[0] if marker.args else ''}")
