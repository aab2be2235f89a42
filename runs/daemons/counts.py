"""Counters kept in memory per process and added to a count table now and then: run
outcomes (OutcomeCount), daemon failures (DaemonErrorCount), recycled worker children
(ChildRecycleCount). They back Prometheus counters (runs/metrics/endpoint.py,
runs/metrics/health.py) that must add up over every process of the deployment, so each
lives in a table, not in one process's memory.

An increment is a dict update under a lock, never a statement: the counts ride on a
write the process makes anyway (the worker's heartbeat, the dispatcher's lease renewal),
one upsert for all of them.
"""

import threading
from collections import Counter

from django.db import DatabaseError, connections


class CountTable:
    """Counts by key for ``model``, a table whose columns are ``keys`` (a tuple of
    column names, unique together) and ``count``.

    ``add`` counts in memory; ``flush`` adds what was counted since the last flush to the
    table in one ``INSERT … ON CONFLICT DO UPDATE`` (PostgreSQL and SQLite both take it);
    ``totals`` reads the table back. Thread-safe: the worker's lanes and its main loop
    count at once."""

    def __init__(self, model, keys: tuple[str, ...]):
        self.model, self.keys = model, keys
        self._counts: Counter = Counter()
        self._lock = threading.Lock()

    def add(self, *key) -> None:
        """Count one for ``key`` (one value per column of ``keys``)."""
        with self._lock:
            self._counts[key] += 1

    def flush(self, using: str = "default", raise_errors: bool = False) -> None:
        """Add the counts since the last flush to the table of database ``using``. When
        the statement fails the counts are kept for the next flush; the error is raised
        with ``raise_errors``, else only a DatabaseError is expected and swallowed (a
        count must not fail its caller's round)."""
        with self._lock:
            pending = dict(self._counts)
            self._counts.clear()
        if not pending:
            return
        table = self.model._meta.db_table
        columns = ", ".join(self.keys)
        row = "(" + ", ".join(["%s"] * (len(self.keys) + 1)) + ")"
        params = [value for key, n in pending.items() for value in (*key, n)]
        try:
            with connections[using].cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {table} ({columns}, count) VALUES "
                    f"{','.join([row] * len(pending))} ON CONFLICT ({columns}) "
                    f"DO UPDATE SET count = {table}.count + excluded.count", params)
        except Exception as exc:
            with self._lock:
                self._counts.update(pending)
            if raise_errors or not isinstance(exc, DatabaseError):
                raise

    def totals(self, using: str = "default") -> list[tuple]:
        """``(*key, count)`` of every key counted so far, from the table, sorted by key."""
        return list(self.model.objects.using(using).order_by(*self.keys)
                    .values_list(*self.keys, "count"))
