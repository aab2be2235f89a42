"""Waking idle workers of the database broker by PostgreSQL LISTEN/NOTIFY
(docs/performance.md, "Waking idle workers on the database broker").

A transaction that makes runs ready (a promote, a push of runs already queued, a one-off
job stored ready: jobs/ingest/one_off.py) sends one NOTIFY on CHANNEL per queue, the queue's name
as payload (``notify_sql``). PostgreSQL delivers it at commit, and not at all on rollback,
so a worker never wakes for runs it cannot see yet. An idle worker blocks on a connection
of its own that LISTENs on CHANNEL (``Listener``) for as long as it would have slept
(WORKER_POLL_S): a notification for one of its queues ends the wait at once. As with the
Redis broker's wake lists the notifications are hints: the lease that follows is what
takes runs, a lost one costs at most one poll, a spare one one empty lease.

The listen connection is direct: through PgBouncer in transaction mode a LISTEN holds no
server session, so DATABASE_LISTEN_URL (settings.py) may name the server itself while
the rest goes through the pooler (docs/scaling.md). A lost or unreachable listen
connection falls back to polling, reconnecting with backoff. SQLite has no
LISTEN/NOTIFY: workers there poll, as before.
"""

import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

import psycopg
from django.conf import settings
from django.db import connections

log = logging.getLogger("scheduler.broker")

CHANNEL = "scheduler_runs_ready"
# How often a waiting worker asks whether to stop waiting (passing_on: it is stopping, or
# its lease lane is pausing to fork a child), so a long WORKER_POLL_S never holds it.
WAIT_SLICE_S = 0.25
# Backoff between failed connects of the listen connection: doubled per failure from the
# first, capped, with jitter so a restarted server is not met by every worker at once.
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
CONNECT_TIMEOUT_S = 5  # libpq's connect_timeout, whole seconds
_INHERITED: list = []  # listen connections a forked process got from its parent


def notify_sql(queues_param: str = "%s") -> str:
    """A SELECT sending one notification on CHANNEL per distinct queue of the text array
    ``queues_param`` (a placeholder or an SQL expression), for statements that add it to
    their own work."""
    return (f"SELECT pg_notify('{CHANNEL}', q) "
            f"FROM (SELECT DISTINCT unnest({queues_param}::text[]) AS q) AS ready")


def notify_ready(using: str, queues: Iterable[str]) -> None:
    """Announce runs made ready in ``queues`` on database alias ``using``: inside a
    transaction PostgreSQL delivers the notifications at its commit, outside one at once.
    Nothing on other databases. Raises what the database raises (DatabaseError)."""
    queues = sorted(set(queues))
    connection = connections[using]
    if not queues or connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(notify_sql(), [queues])


def listen_params(using: str) -> dict:
    """Keyword arguments of psycopg.connect for the listen connection of alias ``using``:
    settings.DATABASE_LISTEN_URL for "default" when set, else the alias's own connection
    settings; in autocommit, with CONNECT_TIMEOUT_S unless given, named "scheduler
    listen" in pg_stat_activity."""
    url = getattr(settings, "DATABASE_LISTEN_URL", None) if using == "default" else None
    params = {"conninfo": url} if url else connections[using].get_connection_params()
    params = {**params, "autocommit": True, "application_name": "scheduler listen"}
    if "connect_timeout" not in params and "connect_timeout=" not in (url or ""):
        params["connect_timeout"] = CONNECT_TIMEOUT_S
    return params


class Listener:
    """One listen connection of a process, shared by its threads: the thread that waits
    first reads the connection, the others wait for what it reads (a lease lane has two
    threads). Opened at the first wait; ``close`` closes it."""

    def __init__(self, using: str):
        self.using = using
        self._cond = threading.Condition()
        self._heard: Counter[str] = Counter()  # notifications received per queue
        # Bumped at each (re)connect: what was sent while nobody listened is lost, so
        # every waiter leases once more.
        self._epoch = 0
        self._conn: psycopg.Connection | None = None
        self._reading = False
        self._failures = 0
        self._retry_at = 0.0
        self._local = threading.local()
        self._pid = os.getpid()

    def _mark(self, queues: list[str]) -> int:
        return self._epoch + sum(self._heard[q] for q in queues)

    def wait(self, queues: list[str], timeout_s: float,
             stop: Callable[[], bool] | None = None) -> bool:
        """Block up to ``timeout_s`` seconds until a notification for one of ``queues``
        arrives (or one arrived since this thread's last wait ended: its lease may have
        missed that run), or ``stop()`` says True (asked every WAIT_SLICE_S); True. False
        at once when there is no listen connection and the next attempt to open one is
        not due (the caller polls). Raises nothing."""
        if os.getpid() != self._pid:
            # A forked child inherited the parent's socket: kept referenced and never
            # used (closing it would end the parent's session); its own comes next.
            _INHERITED.append(self._conn)
            self.__init__(self.using)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            start = self._mark(queues)
            seen = getattr(self._local, "seen", start)
            while self._mark(queues) == start and seen == start:
                now = time.monotonic()
                if now >= deadline or (stop is not None and stop()):
                    break
                if self._reading:
                    self._cond.wait(min(deadline - now, WAIT_SLICE_S))
                    continue
                if self._conn is None and now < self._retry_at:
                    return False
                self._reading = True
                self._cond.release()
                try:
                    heard = self._read(min(deadline - now, WAIT_SLICE_S))
                finally:
                    self._cond.acquire()
                    self._reading = False
                self._heard.update(heard)
                self._cond.notify_all()
            self._local.seen = self._mark(queues)
            return True

    def _read(self, timeout_s: float) -> list[str]:
        """Outside the lock, by one thread at a time: open the connection if there is
        none (the epoch is bumped once it LISTENs), else the queues notified within
        ``timeout_s`` seconds. A lost connection is opened again at the next read; a
        failed open only after the backoff."""
        if self._conn is None:
            try:
                self._connect()
            except (psycopg.Error, OSError) as exc:
                self._failures += 1
                delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._failures - 1))
                self._retry_at = time.monotonic() + delay * random.uniform(0.5, 1.0)
                log.log(logging.WARNING if self._failures == 1 else logging.DEBUG,
                        "listen connection not opened (idle workers poll; next try in "
                        "%.1f s at most): %s", delay, exc)
            return []
        try:
            return [n.payload for n in self._conn.notifies(timeout=timeout_s, stop_after=1)]
        except (psycopg.Error, OSError) as exc:
            log.warning("listen connection lost (opening it again): %s", exc)
            self._drop()
            return []

    def _connect(self) -> None:
        conn = psycopg.connect(**listen_params(self.using))
        try:
            conn.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            conn.close()
            raise
        with self._cond:
            self._conn, self._failures, self._retry_at = conn, 0, 0.0
            self._epoch += 1

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except (psycopg.Error, OSError):
                pass

    def close(self) -> None:
        """Close the listen connection (the next wait opens it again)."""
        with self._cond:
            if not self._reading and os.getpid() == self._pid:
                self._drop()
                self._failures, self._retry_at = 0, 0.0
