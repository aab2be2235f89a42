"""A cursor whose statements PostgreSQL plans once per session (docs/performance.md,
"The cost of an enqueue").

Django binds parameters in the client and turns psycopg's statement preparation off;
scheduler_project/settings.py turns it back on (``prepare_threshold``) for a direct
connection. A hot statement run through ``cursor`` is then prepared at its fifth
execution on the session and not planned again: planning the one-off create cost an
enqueue about a third of its wall time, and the lease statement 0.25 ms of every lease.
"""

from django.db.backends.postgresql.base import ServerBindingCursor


def cursor(connection):
    """A cursor of ``connection`` (a Django PostgreSQL connection) binding its parameters
    on the server when the session may prepare statements (psycopg's
    ``prepare_threshold`` set: a direct connection), Django's own client-binding cursor
    otherwise (PgBouncer in transaction mode, where a prepared statement does not
    outlive a transaction's session). The SQL's placeholders are ``%s`` either way."""
    connection.ensure_connection()
    raw = connection.connection
    if getattr(raw, "prepare_threshold", None) is None:
        return connection.cursor()
    # Django's wrapping of a cursor it made (thread check, DEBUG's query log): there is
    # no public way to wrap one of another class.
    return connection._prepare_cursor(ServerBindingCursor(raw))
