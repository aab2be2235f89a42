"""System checks of the settings the engine reads (docs/security.md, "System checks"):
the isolation settings every daemon parses, and a SQLite database the daemons could not
share. Registered with scheduler_core/checks.py's by runs/apps.py."""

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from runs.daemons.daemon import sqlite_warning
from runs.history import time_partitions
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


@checks.register(TAG)
def check_history_partitions(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.E011: HISTORY_PARTITION_S neither 0 nor at least 60 seconds: the
    dispatcher could not keep partitions ahead (runs/history/time_partitions.py,
    width_s), and the rows would pile up in the DEFAULT partition."""
    try:
        width = conf.get("HISTORY_PARTITION_S")
    except ImproperlyConfigured:
        return []  # a value that does not read as its type: scheduler.E004 names it
    if width == 0 or width >= time_partitions.MIN_WIDTH_S:
        return []
    return [checks.Error(
        f"HISTORY_PARTITION_S is {width}: a partition of the history tables must be at "
        f"least {time_partitions.MIN_WIDTH_S} seconds wide (0: plain tables, only when "
        "migrating a new database).",
        hint="Leave it at its default, a day (86400), or give a width of a minute or more; "
             "docs/retention.md, \"Partitioned history\"",
        id="scheduler.E011")]
