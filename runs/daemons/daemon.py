"""What every daemon shares: lifecycle log lines, signals, and surviving the outside world
(docs/architecture.md, "Conventions in the code").

A daemon is a class with ``round()`` (one pass of work; returns True when it did work, so
the loop goes again at once) and ``shutdown()``. ``serve()`` runs rounds until SIGTERM or
SIGINT: the first asks for a graceful stop, the second forces. A database or Redis error in
a round is logged as one line and retried with capped backoff, so the daemon reconnects
when the service comes back instead of crash-looping. Any other exception from a round is
the round's failure, not the process's: logged with its traceback, counted and backed off
(runs/daemons/isolation.py); the duties and items inside a round are isolated the same way.
"""

import logging
import os
import signal
import threading
import time

import redis
from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    close_old_connections,
    connections,
)
from redis.exceptions import RedisClusterException

from runs.brokers import get_broker
from runs.daemons.isolation import Faults
from scheduler_core import logs
from scheduler_core.exceptions import BrokerUnavailable, SchedulerError

# RedisClusterException is not a RedisError: without it a cluster whose nodes all went
# away ended every daemon (runs/brokers/redis/wire.py UNAVAILABLE).
TRANSIENT = (DatabaseError, InterfaceError, BrokerUnavailable, redis.RedisError,
             RedisClusterException)
# The database refusing one row's values is that row's fault, not an outage.
ROW_ERRORS = (DataError, IntegrityError)
HOUSEKEEP_INTERVAL_S = 1.0
# How long a graceful stop may take (plus the worker's grace) before the daemon exits
# anyway (docs/architecture.md, "Stopping"). A round or the shutdown can wait on a row lock
# a stalled peer holds (up to DB_IDLE_IN_TRANSACTION_TIMEOUT_MS, a minute); a rolling
# deploy must not. Whatever it held is safe to abandon: its leases expire on their own.
STOP_BOUND_S = 5.0


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` says the database or the broker is unavailable (the daemon waits
    and retries the round) rather than that one item or duty failed (runs/daemons/isolation.py)."""
    return isinstance(exc, TRANSIENT) and not isinstance(exc, ROW_ERRORS)


def sqlite_warning(settings_dict: dict) -> str | None:
    """What is missing from a SQLite database's settings (a DATABASES entry) for daemons in
    separate processes to share it, or None (not SQLite, or set as this project sets it:
    docs/django-tasks.md, "The database and logging settings of a project of your own").
    Without IMMEDIATE transactions and a timeout, writers fail with "database is locked"."""
    if settings_dict.get("ENGINE") != "django.db.backends.sqlite3":
        return None
    options = settings_dict.get("OPTIONS") or {}
    missing = []
    if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
        missing.append('"transaction_mode": "IMMEDIATE"')
    if not options.get("timeout"):
        missing.append('"timeout": 30')
    if "journal_mode=wal" not in str(options.get("init_command", "")).lower().replace(" ", ""):
        missing.append('"init_command": "PRAGMA journal_mode=WAL;"')
    if not missing:
        return None
    return ("SQLite without " + ", ".join(missing) + " in its OPTIONS: the daemons will "
            "fail with 'database is locked' (see docs/django-tasks.md; or use PostgreSQL)")


class Daemon:
    """Base of the scheduler, dispatcher and worker daemons."""

    name = "daemon"
    interval_s = 1.0

    def __init__(self, using: str = "default"):
        self.using = using
        self.log = logging.getLogger(f"scheduler.{self.name}")
        self.stopping = False
        self.forced = False
        self.rounds = 0
        self.last_failure_log = 0.0
        self.housekept_at = float("-inf")
        self.watchdog: threading.Timer | None = None
        self.signals_installed = False
        self.faults = Faults(self.name, self.log, using, transient)

    # --- to override ------------------------------------------------------------------

    def round(self) -> bool:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Called once when the loop ends (graceful or forced)."""

    def keep_going(self) -> bool:
        """Whether the loop runs another round; by default, until a stop is requested."""
        return not self.stopping

    def stop_bound_s(self) -> float:
        """Seconds from the first stop signal to the process's exit, at most
        (docs/architecture.md, "Stopping")."""
        return STOP_BOUND_S

    # --- lifecycle --------------------------------------------------------------------

    def request_stop(self, signum=None, frame=None) -> None:
        """First call: finish gracefully. Second call: force (docs/architecture.md, "Daemons")."""
        if self.stopping:
            self.forced = True
            self.log.info("%s: second stop signal, forcing", self.name)
        else:
            self.stopping = True
            self.log.info("%s: stop requested, finishing", self.name)
            if self.signals_installed:  # a daemon process, not an object a test drives
                self.watchdog = threading.Timer(self.stop_bound_s(), self.overdue)
                self.watchdog.daemon = True
                self.watchdog.start()

    def overdue(self) -> None:
        """The stop took longer than stop_bound_s: log it and exit the process at once
        (status 1), from the watchdog's thread, whatever the main thread waits on."""
        self.log.warning("%s: not stopped %g s after the stop request (waiting on the "
                         "database or broker?); exiting now, what it held expires with its "
                         "leases", self.name, self.stop_bound_s())
        logs.write_held()  # lines a thread held to write at once (scheduler_core/logs.py)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        self.signals_installed = True

    def check_ready(self) -> None:
        """Raise SchedulerError naming what is unreachable: the database or the broker.
        Settings are the system checks' (runs/checks.py), run before this by
        runs/daemons/command.py."""
        try:
            connections[self.using].ensure_connection()
        except DatabaseError as exc:
            raise SchedulerError(f"database {self.using!r} is unreachable: {exc}") from exc
        try:
            get_broker(self.using).ping()
        except (BrokerUnavailable, DatabaseError, redis.RedisError,
                RedisClusterException) as exc:
            raise SchedulerError(f"broker is unreachable: {exc}") from exc

    def note_failure(self, what: str, exc: Exception, failures: int = 1) -> None:
        """Log a failed step: the first of a streak as one WARNING line, then one reminder
        a minute, so an outage does not flood the log."""
        now = time.monotonic()
        if failures > 1 and now - self.last_failure_log < 60:
            return
        self.last_failure_log = now
        self.log.warning("%s: %s failed (%s: %s); retrying with backoff", self.name, what,
                         type(exc).__name__, (str(exc).strip() or "-").splitlines()[0][:200])

    def sleep(self, seconds: float) -> None:
        """Sleep in short steps so a stop signal is noticed quickly."""
        deadline = time.monotonic() + seconds
        while not self.stopping and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))

    def housekeep_connections(self) -> None:
        """Django's per-request connection care (CONN_MAX_AGE, CONN_HEALTH_CHECKS), at most
        once per HOUSEKEEP_INTERVAL_S: it arms a ``SELECT 1`` health check before the next
        query, and a busy worker runs hundreds of rounds a second (BENCHMARKS.md). A
        connection that breaks in between fails its round, which closes it (serve)."""
        now = time.monotonic()
        if now - self.housekept_at >= HOUSEKEEP_INTERVAL_S:
            self.housekept_at = now
            close_old_connections()

    def serve(self, max_rounds: int | None = None) -> None:
        """Run rounds until stopped (or ``max_rounds``, for tests)."""
        self.log.info("%s: started (broker %s, database %s)", self.name,
                      get_broker(self.using).name, connections[self.using].vendor)
        failures = 0
        while self.keep_going() and (max_rounds is None or self.rounds < max_rounds):
            self.rounds += 1
            try:
                self.housekeep_connections()
                busy = self.round()
                if failures:
                    self.log.info("%s: reconnected after %d failed rounds", self.name, failures)
                failures = 0
            except Exception as exc:
                for connection in connections.all(initialized_only=True):
                    connection.close_if_unusable_or_obsolete()
                if transient(exc):
                    failures += 1
                    self.note_failure("round", exc, failures)
                    self.sleep(min(0.2 * 2 ** failures, 5.0))
                else:  # a bug or a poisoned row: the round's failure, not the process's
                    self.faults.failed("round", None, exc)
                    self.sleep(self.faults.wait_s("round"))
                continue
            if self.faults.streaks:
                self.faults.succeeded("round")
            if not busy:
                self.sleep(self.interval_s)
        try:
            self.shutdown()
        except TRANSIENT as exc:
            self.log.warning("%s: shutdown incomplete: %s", self.name, exc)
        if self.watchdog is not None:
            self.watchdog.cancel()
        self.log.info("%s: stopped", self.name)
