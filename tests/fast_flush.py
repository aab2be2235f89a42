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
"""

from django.core.management.color import no_style
from django.db import connections
from django.test import TransactionTestCase

# What post_migrate's receivers (django.contrib.contenttypes, django.contrib.auth) fill.
KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})

_django_teardown = TransactionTestCase._fixture_teardown


def _fixture_teardown(self: TransactionTestCase) -> None:
    """Empty every table of each database the test used except KEPT_TABLES; a test
    case with available_apps or serialized_rollback keeps Django's own teardown."""
    if self.available_apps is not None or self.serialized_rollback:
        _django_teardown(self)
        return
    for alias in self._databases_names(include_mirrors=False):
        connection = connections[alias]
        tables = [t for t in connection.introspection.django_table_names(
            only_existing=True, include_views=False) if t not in KEPT_TABLES]
        connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables))


def install() -> None:
    """Make every TransactionTestCase (pytest-django's transactional tests) flush this
    way; called once from tests/conftest.py."""
    TransactionTestCase._fixture_teardown = _fixture_teardown
