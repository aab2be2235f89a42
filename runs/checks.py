"""System checks of the settings the engine reads (docs/security.md, "System checks"):
the isolation settings every daemon parses, and a SQLite database the daemons could not
share. Registered with scheduler_core/checks.py's by runs/apps.py."""

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from runs.daemons.daemon import sqlite_warning
from runs.tenancy import policy
from scheduler_core import conf
from scheduler_core.startup import TAG

ISOLATION_TUNABLES = ("PRIORITY_CLASSES", "QUEUE_CONCURRENCY", "QUEUE_RATE",
                      "OWNER_CONCURRENCY", "FAIR_SCAN", "SHARDS", "SPREAD_QUEUES")


@checks.register(TAG)
def check_isolation(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.E005: a bad isolation setting (PRIORITY_CLASSES, QUEUE_CONCURRENCY,
    QUEUE_RATE, OWNER_CONCURRENCY, FAIR_SCAN, SHARDS, SPREAD_QUEUES:
    runs/tenancy/policy.py)."""
    try:
        for name in ISOLATION_TUNABLES:
            conf.get(name)
    except ImproperlyConfigured:
        return []  # a value that does not read as its type: scheduler.E004 names it
    try:
        policy.check()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), hint="docs/isolation.md gives each setting's form",
                             id="scheduler.E005")]
    return []


@checks.register(TAG)
def check_sqlite(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.W006: a SQLite database without what daemons in separate processes need
    to share it (IMMEDIATE transactions, a busy timeout, WAL)."""
    return [checks.Warning(f"DATABASES[{alias!r}]: {warning}", id="scheduler.W006")
            for alias, config in settings.DATABASES.items()
            if (warning := sqlite_warning(config))]
