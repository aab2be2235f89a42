"""The flush between transactional tests, without its post_migrate (docs/testing.md,
"The 15-minute budget").

Django's TransactionTestCase empties every table after each test and then sends
post_migrate, whose receivers (contenttypes, auth) create the content types and
permissions again: about half of each flush, paid on both databases after every
transactional test. Here the two tables those receivers fill are kept instead and the
rest is emptied, so each test starts from the same rows as before (the migrated
database's content types and permissions, nothing else).
A test that changed either table would leak that change to the next one: none of the
suite's does.

Only the tables that hold a row are emptied, found by one query: most transactional
tests write to a few tables of one database. On PostgreSQL they are emptied by DELETE in
one transaction (every foreign key the migrations make is deferrable, so the order does
not matter), then VACUUMed: TRUNCATE ... CASCADE, Django's flush, makes every table and
index it reaches anew, each partition of the history tables too, 0.1-1 s a test on 2
cores, where the DELETE and VACUUM of a test's few rows take milliseconds (docs/testing.md,
"The 15-minute budget"). Should the DELETE fail, the tables are emptied by TRUNCATE ...
CASCADE, which also empties every table referencing one of them, as on SQLite (Django's
flush there is a DELETE of each table).
"""

from django.core.management.color import no_style
from django.db import DatabaseError, connections, transaction
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
        if connection.vendor == "postgresql" and deleted(connection):
            continue
        try:
            tables = holding_rows(connection, model_tables(connection))
        except DatabaseError:  # a table gone since (a migration test): look again
            _model_tables.pop(alias, None)
            tables = holding_rows(connection, model_tables(connection))
        if tables:
            connection.ops.execute_sql_flush(
                connection.ops.sql_flush(no_style(), tables, allow_cascade=True))


def deleted(connection) -> bool:
    """On PostgreSQL: with every model table locked as TRUNCATE locks it (a writer left
    over from the test is waited for), DELETE the rows of those holding any, in one
    transaction, then VACUUM them, which gives their pages back (each starts as small
    as a table emptied by TRUNCATE, for the planner too). False, with nothing deleted,
    when PostgreSQL refused (a table gone since, a row of no model's table referencing
    a deleted row): the caller empties them by TRUNCATE."""
    tables = model_tables(connection)
    quote = connection.ops.quote_name
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {', '.join(map(quote, tables))} "
                           "IN ACCESS EXCLUSIVE MODE")
            held = holding_rows(connection, tables)
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            for table in held:
                cursor.execute(f"DELETE FROM {quote(table)}")
    except DatabaseError:
        _model_tables.pop(connection.alias, None)
        return False
    if held:
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM {', '.join(map(quote, held))}")
    return True


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
