"""Named leases: work that one process at a time may do, such as finishing detached
history partitions (retention.finish_detached), held by a row of NamedLease.

A session-level advisory lock does not hold through PgBouncer in transaction mode: its
unlock may reach another server session than its lock, which then stays held until
PgBouncer closes that session (docs/scaling.md, "PgBouncer"). A lease row keeps no
session state: it is taken, renewed and released by single statements, each its own
transaction, and expires on the database clock when its holder dies. PostgreSQL only
(the statements use its clock and upsert).
"""

import os
import socket
import uuid

from django.db import connections

from runs.models import NamedLease

TABLE = NamedLease._meta.db_table


def new_holder() -> str:
    """A holder name unique to this call: host, process id and a random part, so that
    two threads of one process, or two calls of one thread, never pass for each other."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def take(name: str, holder: str, ttl_s: float, using: str = "default") -> bool:
    """Take or renew lease ``name`` (at most 64 characters) for ``holder`` until
    ``ttl_s`` seconds (> 0) from now on the database clock; True when ``holder`` has it
    now, False when another holder's lease on it is still live. One fenced statement:
    of two takers at once exactly one wins. Raises ValueError on a bad ``name``,
    ``holder`` or ``ttl_s`` (naming it), django.db.DatabaseError from the database."""
    if not name or len(name) > 64:
        raise ValueError(f"name: 1-64 characters, not {name!r}")
    if not holder or len(holder) > 200:
        raise ValueError(f"holder: 1-200 characters, not {holder!r}")
    if not 0 < ttl_s < 1e9:  # False for NaN too
        raise ValueError(f"ttl_s: more than 0 seconds, not {ttl_s!r}")
    with connections[using].cursor() as cursor:
        # The row is made on first use; on conflict, the WHERE is the fence: the update
        # happens (and a row comes back) only when the lease is free, expired or ours.
        cursor.execute(
            f"INSERT INTO {TABLE} AS l (name, holder, expires_at) "
            "VALUES (%s, %s, clock_timestamp() + make_interval(secs => %s)) "
            "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
            "expires_at = excluded.expires_at "
            "WHERE l.holder = excluded.holder OR l.expires_at IS NULL "
            "OR l.expires_at < clock_timestamp() RETURNING 1",
            [name, holder, float(ttl_s)])
        return cursor.fetchone() is not None


def release(name: str, holder: str, using: str = "default") -> bool:
    """Give lease ``name`` back if ``holder`` still has it (others may take it at once);
    True when it did. Raises django.db.DatabaseError from the database."""
    with connections[using].cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET holder = '', expires_at = NULL "
                       "WHERE name = %s AND holder = %s", [name, holder])
        return cursor.rowcount == 1
