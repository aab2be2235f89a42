"""The flush between transactional tests, without its post_migrate (docs/testing.md,
"The 15-minute budget").

Django's TransactionTestCase empties every table after each test and then sends
post_migrate, whose receivers (contenttypes, auth) create the content types and
permissions again: about half of each flush, paid on both databases after every
transactional test. Here the two tables those receivers fill are kept instead and the
rest is emptied by the same SQL Django's flush runs, so each test starts from the same
rows as before (the migrated database's content types and permissions, nothing else).
A test that changed either table would leak that change to the next one: none of the
suite's does.

Only the tables that hold a row are emptied, found by one query: most transactional
tests write to a few tables of one database, and PostgreSQL's TRUNCATE of all ~40 (each
partition of the history tables too) took 0.1-0.4 s per test on 2 cores (load 2-10),
mostly for nothing.
CASCADE empties, with a table emptied, every table that references it (all of them
empty, or found too), as PostgreSQL's TRUNCATE requires.
"""

from django.core.management.color import no_style
from django.db import DatabaseError, connections
from django.test import TransactionTestCase

# What post_migrate's receivers (django.contrib.contenttypes, django.contrib.auth) fill.
KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})

_django_teardown = TransactionTestCase._fixture_teardown
_model_tables: dict[str, list[str]] = {}  # alias -> model_tables()


def _fixture_teardown(self: TransactionTestCase) -> None:
    """Empty every table of each database the test used except KEPT_TABLES; a test
    case with available_apps or serialized_rollback keeps Django's own teardown."""
    if self.available_apps is not None or self.serialized_rollback:
        _django_teardown(self)
        return
    for alias in self._databases_names(include_mirrors=False):
        connection = connections[alias]
        try:
            tables = holding_rows(connection, model_tables(connection))
        except DatabaseError:  # a table gone since (a migration test): look again
            _model_tables.pop(alias, None)
            tables = holding_rows(connection, model_tables(connection))
        if tables:
            connection.ops.execute_sql_flush(
                connection.ops.sql_flush(no_style(), tables, allow_cascade=True))


def model_tables(connection) -> list[str]:
    """The existing tables of ``connection``'s models but KEPT_TABLES, looked up once per
    database alias (the catalogue query cost as much as the rest of an empty flush)."""
    if connection.alias not in _model_tables:
        _model_tables[connection.alias] = [
            t for t in connection.introspection.django_table_names(
                only_existing=True, include_views=False) if t not in KEPT_TABLES]
    return _model_tables[connection.alias]


def holding_rows(connection, tables: list[str]) -> list[str]:
    """The names among ``tables`` (existing tables of ``connection``'s database) that
    hold at least one row, in one query; [] for no tables."""
    if not tables:
        return []
    quote = connection.ops.quote_name
    query = " UNION ALL ".join(
        f"SELECT {i} WHERE EXISTS (SELECT 1 FROM {quote(t)})" for i, t in enumerate(tables))
    with connection.cursor() as cursor:
        cursor.execute(query)
        return [tables[row[0]] for row in cursor.fetchall()]


def install() -> None:
    """Make every TransactionTestCase (pytest-django's transactional tests) flush this
    way; called once from tests/conftest.py."""
    TransactionTestCase._fixture_teardown = _fixture_teardown
