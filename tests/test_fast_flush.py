"""The flush between transactional tests (tests/fast_flush.py): it empties the tables
holding rows, those referencing them too, and keeps the content types and permissions."""

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connections
from django.test import TransactionTestCase
from django.utils import timezone

from jobs.models import Job
from tests import fast_flush


class Case(TransactionTestCase):
    databases = {"default", "sqlite"}

    def runTest(self):
        """Nothing: only its teardown is called."""


def flush() -> None:
    Case()._fixture_teardown()


@pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_rows_and_the_rows_referencing_them_are_emptied(alias):
    kept = (ContentType.objects.using(alias).count(), Permission.objects.using(alias).count())
    owner = User.objects.db_manager(alias).create_user("flushed")
    Job.objects.using(alias).create(name="j", handler="noop", owner=owner,
                                    run_at=timezone.now())

    flush()

    assert not User.objects.using(alias).exists()
    assert not Job.objects.using(alias).exists()
    assert (ContentType.objects.using(alias).count(),
            Permission.objects.using(alias).count()) == kept


@pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_a_table_referenced_by_empty_ones_is_emptied(alias):
    """Only auth_user holds a row, and other tables reference it: emptied all the same
    (a DELETE on PostgreSQL, where a TRUNCATE would have to name them too)."""
    User.objects.db_manager(alias).create_user("alone")
    assert fast_flush.holding_rows(connections[alias], fast_flush.model_tables(
        connections[alias])) == ["auth_user"]

    flush()

    assert not User.objects.using(alias).exists()
    assert fast_flush.holding_rows(connections[alias],
                                   fast_flush.model_tables(connections[alias])) == []
