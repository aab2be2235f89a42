"""One clock (docs/architecture.md, "Invariants" 7): claims and leases use the database's
clock, never a worker's. On PostgreSQL that is ``clock_timestamp()``; SQLite has no server, so the
embedded default uses the host clock, which is the same machine's clock anyway."""

from datetime import UTC, datetime, timedelta

from django.db import connections
from django.utils import timezone

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)
MICROSECOND = timedelta(microseconds=1)


def db_now(using: str = "default") -> datetime:
    """The database's current time as an aware UTC datetime (one round trip on PostgreSQL)."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()


def to_ms(moment: datetime) -> int:
    """Milliseconds since the Unix epoch for an aware datetime (the Redis scores' unit),
    rounded up: a run whose score says it is due is never due later than that, so a lease
    (Redis clock) cannot start it before its run_at (database clock, microseconds)."""
    global _last_ms
    last = _last_ms
    if last[0] is moment:  # a batch's runs share one run_at: pushed, then woken for
        return last[1]
    ms = -((EPOCH - moment) // MILLISECOND)
    _last_ms = (moment, ms)  # one tuple, replaced whole: safe between threads
    return ms


_last_ms: tuple = (None, 0)


def to_us(moment: datetime) -> int:
    """Microseconds since the Unix epoch for an aware datetime (exact): how the worker and
    its children pass times (runs/worker/child.py)."""
    return (moment - EPOCH) // MICROSECOND


def from_us(us: int) -> datetime:
    """The aware UTC datetime ``us`` microseconds after the Unix epoch (inverse of to_us)."""
    return EPOCH + us * MICROSECOND


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
