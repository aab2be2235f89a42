"""Settings for the test suite: real PostgreSQL as ``default``, a second ``sqlite`` alias
so the one broker contract suite also runs on SQLite in the same session, and real Redis
(database 15, key prefix ``schedtest``). One test (tests/test_redis_loss.py) runs FLUSHDB
on that Redis database: never point TEST_REDIS_URL at a database whose data matters.

TEST_DATABASE_URL and TEST_REDIS_URL override the local defaults; scripts/test sets them
to throwaway servers of its own, and SCHEDULER_REDIS_PREFIX to one of its own
(docs/testing.md). Suites run side by side on the same servers need their own
TEST_DATABASE_URL and SCHEDULER_REDIS_PREFIX; the SQLite file is named after the prefix,
so they do not share it either.
"""

import os
from urllib.parse import urlsplit

os.environ.setdefault("SCHEDULER_REDIS_PREFIX", "schedtest")
# The suite runs as a developer's machine does (pytest-django still serves each test with
# DEBUG off); daemons it starts inherit this, as they did when DEBUG defaulted to on.
# Tests of the production defaults read settings.py under an environment of their own.
os.environ.setdefault("DEBUG", "true")
# Spans only in the tests of tracing, which turn it on (tests/spans.py): the tracer
# provider they set stays for the rest of the process, and the other tests are tracing off.
os.environ.setdefault("SCHEDULER_TRACING", "off")

# The fault-injection app and the demo handlers are installed (settings_chaos), as in the
# daemons tests start.
from scheduler_project.settings_chaos import *  # noqa: E402,F403
from scheduler_project.settings_chaos import BASE_DIR, database_config  # noqa: E402

DATABASES = {
    "default": database_config(
        os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/scheduler")
    ),
    "sqlite": database_config(
        f"sqlite:///{BASE_DIR / 'test-broker.sqlite3'}"
        if os.environ["SCHEDULER_REDIS_PREFIX"] == "schedtest"
        else f"sqlite:///{BASE_DIR / ('test-broker-' + os.environ['SCHEDULER_REDIS_PREFIX'])}"
             ".sqlite3"),
}
# The PgBouncer lane (docs/testing.md): TEST_DATABASE_URL is a PgBouncer's in transaction
# mode with DATABASE_POOLER=pgbouncer, and TEST_DATABASE_LISTEN_URL names PostgreSQL itself,
# where idle workers LISTEN: on the test database (pytest-django's "test_" name).
if os.environ.get("TEST_DATABASE_LISTEN_URL"):
    DATABASE_LISTEN_URL = urlsplit(os.environ["TEST_DATABASE_LISTEN_URL"])._replace(
        path="/test_" + DATABASES["default"]["NAME"]).geturl()
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# A plain Redis for the tests' own bookkeeping (signals a worker's child noted, run
# order): it stays the single test Redis while the cluster pair points REDIS_URL at the
# Redis Cluster (tests/conftest.py, redis_at).
SCRATCH_REDIS_URL = REDIS_URL
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
WHITENOISE_AUTOREFRESH = True
# The Django cache (throttle counts) is per process in tests, whatever REDIS_URL the shell
# has exported: tests/conftest.py empties it before every test, which must never be a
# FLUSHDB of someone's Redis. Tests of the Redis-backed throttle override CACHES.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
