"""Read replicas (docs/scaling.md, "Read replicas"): the history lists, attempt logs and
the dashboard may be read from a PostgreSQL streaming replica whose replay lag is within
DATABASE_REPLICA_MAX_LAG_S; everything else, every write and every claim or lease
included, goes to the primary (the ``default`` database).

A replica is read only where a view asks for it, two ways:

* ``replica_reads()``, a context manager: inside it ``ReplicaRouter`` sends the ORM's
  reads to a replica, unless the default database is inside a transaction (an
  ``atomic`` block: whatever reads there may feed a write, and must see the primary).
* ``read_alias()``: the alias to pass to ``.using()`` for one query set.

Replica aliases are ``replica_1``, ``replica_2``, ... made from DATABASE_REPLICA_URL
(comma-separated URLs) by ``replica_databases``. Each replica's lag is measured on the
replica itself and cached for LAG_CACHE_S per process; a replica that cannot be reached
counts as infinitely late, so reads fall back to the primary.
"""

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

REPLICA_PREFIX = "replica_"
DEFAULT_MAX_LAG_S = 5.0
LAG_CACHE_S = 1.0
# Seconds a replica is behind: 0 when it has replayed all it received from a live WAL
# receiver (or is no standby at all: promoted), else the age of the last transaction it
# replayed. With the receiver gone it cannot know what it misses: the age again, which
# on a quiet primary is large, so reads go to the primary. NULL (nothing replayed since
# it started, and not caught up) is read as infinitely late.
LAG_SQL = """
SELECT CASE
  WHEN NOT pg_is_in_recovery() THEN 0
  WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
       AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver) THEN 0
  ELSE extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())
END
"""

_reading: ContextVar[bool] = ContextVar("replica_reads", default=False)
_lags: dict[str, tuple[float, float]] = {}  # alias -> (time.monotonic() measured, lag s)


def replica_databases(urls: str, parse: Callable[[str], dict]) -> dict[str, dict]:
    """DATABASES entries ``replica_1``, ``replica_2``, ... for the comma-separated
    PostgreSQL URLs in ``urls`` (DATABASE_REPLICA_URL; empty: none), each parsed with
    ``parse`` (settings.database_config: dj-database-url plus the per-engine options). A
    replica gets connect_timeout 2 s unless its URL sets one, so that an unreachable one
    costs a request 2 s at most, once per LAG_CACHE_S. Raises ImproperlyConfigured for a
    URL that is not PostgreSQL's: only PostgreSQL replicas report their replay lag."""
    databases = {}
    for number, url in enumerate((u.strip() for u in urls.split(",") if u.strip()), 1):
        config = parse(url)
        if config["ENGINE"] != "django.db.backends.postgresql":
            raise ImproperlyConfigured(
                f"DATABASE_REPLICA_URL: replica {number} is not a PostgreSQL URL "
                "(docs/scaling.md, 'Read replicas')")
        config.setdefault("OPTIONS", {}).setdefault("connect_timeout", 2)
        databases[f"{REPLICA_PREFIX}{number}"] = config
    return databases


def replica_aliases() -> list[str]:
    """The aliases of the configured replicas (settings.DATABASES), in order."""
    return [alias for alias in settings.DATABASES if alias.startswith(REPLICA_PREFIX)]


def max_lag_s() -> float:
    """DATABASE_REPLICA_MAX_LAG_S (s, default DEFAULT_MAX_LAG_S): the staleness bound."""
    return float(getattr(settings, "DATABASE_REPLICA_MAX_LAG_S", DEFAULT_MAX_LAG_S))


def replica_lag_s(alias: str, *, fresh: bool = False) -> float:
    """Seconds replica ``alias`` is behind its primary (LAG_SQL), measured at most every
    LAG_CACHE_S (``fresh``: now); ``inf`` when the replica cannot be reached or does
    not know."""
    now = time.monotonic()
    cached = _lags.get(alias)
    if cached is not None and not fresh and now - cached[0] < LAG_CACHE_S:
        return cached[1]
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute(LAG_SQL)
            value = cursor.fetchone()[0]
        lag = float("inf") if value is None else max(0.0, float(value))
    except DatabaseError:
        connections[alias].close()  # a broken connection is not reused
        lag = float("inf")
    _lags[alias] = (now, lag)
    return lag


def fresh_replica() -> str | None:
    """A replica alias, at random among those within the staleness bound; None when there
    is none (no replica configured, or every one too late or down)."""
    bound = max_lag_s()
    fresh = [alias for alias in replica_aliases() if replica_lag_s(alias) <= bound]
    return random.choice(fresh) if fresh else None


def read_alias() -> str:
    """The alias for a read-only query set of history (``.using(read_alias())``): a fresh
    replica, else ``default``. Never use it for a read that decides a write."""
    return fresh_replica() or DEFAULT_DB_ALIAS


@contextmanager
def replica_reads() -> Iterator[None]:
    """Within the block, ReplicaRouter sends ORM reads without ``.using()`` to a fresh
    replica (outside transactions on the primary). For read-only views only."""
    token = _reading.set(True)
    try:
        yield
    finally:
        _reading.reset(token)


def _is_replica(alias: str | None) -> bool:
    return bool(alias) and alias.startswith(REPLICA_PREFIX)


class ReplicaRouter:
    """DATABASE_ROUTERS' entry (scheduler_project/settings.py). Reads go to a replica
    only inside ``replica_reads()`` and never while the primary is in a transaction;
    writes of an object read from a replica go to the primary; migrations never run on
    a replica. Other aliases (the test suite's ``sqlite``) are left as Django routes
    them."""

    def db_for_read(self, model, **hints):
        instance = hints.get("instance")
        db = getattr(getattr(instance, "_state", None), "db", None)
        if db is not None and not _is_replica(db) and db != DEFAULT_DB_ALIAS:
            return None  # an object of another database: its own
        if not _reading.get() or connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return DEFAULT_DB_ALIAS if _is_replica(db) else None
        if _is_replica(db):
            return db  # an object's relations from the replica it came from
        return fresh_replica() or DEFAULT_DB_ALIAS

    def db_for_write(self, model, **hints):
        instance = hints.get("instance")
        db = getattr(getattr(instance, "_state", None), "db", None)
        return DEFAULT_DB_ALIAS if _is_replica(db) else None

    def allow_relation(self, obj1, obj2, **hints):
        dbs = {DEFAULT_DB_ALIAS if _is_replica(o._state.db) else o._state.db
               for o in (obj1, obj2)}
        return True if dbs == {DEFAULT_DB_ALIAS} else None

    def allow_migrate(self, db, app_label, **hints):
        return False if _is_replica(db) else None


class ReplicaList:
    """A mixin for a DRF viewset, before its ListModelMixin: the ``list`` action runs in
    ``replica_reads()``, after authentication and permissions, which read the primary
    (a token made a moment ago must work). Retrieve and every other action: the primary."""

    def list(self, request, *args, **kwargs):
        with replica_reads():
            return super().list(request, *args, **kwargs)
