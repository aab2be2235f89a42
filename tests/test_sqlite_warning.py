"""A daemon started on SQLite without the options its processes need to share it warns
at start (docs/django-tasks.md, "The database and logging settings of a project of your
own"): Django's default SQLite settings gave a user's daemons "database is locked"."""

from django.conf import settings

from runs.daemons.daemon import sqlite_warning
from scheduler_project.settings import database_config


def test_djangos_default_sqlite_settings_are_warned_about_by_name():
    default = {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}
    warning = sqlite_warning(default)
    assert warning is not None
    assert '"transaction_mode": "IMMEDIATE"' in warning and '"timeout": 30' in warning
    assert "journal_mode=WAL" in warning


def test_this_projects_sqlite_settings_and_postgresql_are_not_warned_about():
    assert sqlite_warning(database_config("sqlite:///db.sqlite3")) is None
    assert sqlite_warning(settings.DATABASES["default"]) is None
