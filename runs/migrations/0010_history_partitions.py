"""The run history in time partitions on PostgreSQL (docs/retention.md, "Partitioned
history"; runs/history/time_partitions.py).

Attempts and log lines get ``run_scheduled_at`` (their run's scheduled_at, filled in from
the runs), the foreign keys into runs and attempts leave the database (Django keeps the
relations), and on PostgreSQL the three tables are rebuilt as range-partitioned tables:
partitions of HISTORY_PARTITION_S from the start of the retention (or of the oldest run,
if later) to HISTORY_PARTITIONS_AHEAD past now, a DEFAULT partition for the rest, every
row copied over, every index and constraint rebuilt under its name (the primary key and
unique keys with the partition key added), ids continuing from the same sequence
position. SQLite keeps plain tables (and PostgreSQL with HISTORY_PARTITION_S=0). On a populated database this copies the history
once, under an exclusive lock: minutes for tens of millions of rows. Irreversible.
"""

from datetime import timedelta

import django.db.models.deletion
from django.db import migrations, models

TABLES = (("runs_run", "scheduled_at"), ("runs_attempt", "run_scheduled_at"),
          ("runs_logline", "run_scheduled_at"))
# Rows older than this many widths before now go to the DEFAULT partition whatever the
# retention (a retention of 0 keeps everything: one partition a day for years is not
# what anyone wants created in one go).
MAX_PARTITIONS_BACK = 31


def backfill(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        if schema_editor.connection.vendor == "postgresql":
            cursor.execute("UPDATE runs_attempt a SET run_scheduled_at = r.scheduled_at "
                           "FROM runs_run r WHERE r.id = a.run_id")
            cursor.execute("UPDATE runs_logline l SET run_scheduled_at = a.run_scheduled_at "
                           "FROM runs_attempt a WHERE a.id = l.attempt_id")
            return
        cursor.execute("UPDATE runs_attempt SET run_scheduled_at = (SELECT scheduled_at "
                       "FROM runs_run WHERE runs_run.id = runs_attempt.run_id)")
        cursor.execute("UPDATE runs_logline SET run_scheduled_at = (SELECT run_scheduled_at "
                       "FROM runs_attempt WHERE runs_attempt.id = runs_logline.attempt_id)")


def initial_ranges(cursor):
    """The ranges to create: from the retention's start (or the oldest run, if later) to
    HISTORY_PARTITIONS_AHEAD widths past now."""
    from runs.history import time_partitions as history_partitions
    from scheduler_core import conf

    width = history_partitions.width_s()
    cursor.execute("SELECT clock_timestamp(), min(scheduled_at) FROM runs_run")
    now, oldest = cursor.fetchone()
    retention = conf.get("HISTORY_RETENTION_S")
    back = min(retention, MAX_PARTITIONS_BACK * width) if retention > 0 else (
        MAX_PARTITIONS_BACK * width)
    start = now - timedelta(seconds=back + width)
    if oldest is None or oldest > now:
        start = now
    elif oldest > start:
        start = oldest
    lower = history_partitions.floor_to_width(start, width)
    end = now + timedelta(seconds=width * conf.get("HISTORY_PARTITIONS_AHEAD"))
    ranges = []
    while lower <= end:
        upper = lower + timedelta(seconds=width)
        ranges.append(history_partitions.Range(lower, upper))
        lower = upper
    return ranges


def partition(apps, schema_editor):
    from scheduler_core import conf

    # HISTORY_PARTITION_S=0: plain tables on PostgreSQL too (bench/partitions.py's
    # "before"; a deployment that prefers the row-by-row prune).
    if schema_editor.connection.vendor != "postgresql" or not conf.get("HISTORY_PARTITION_S"):
        return
    with schema_editor.connection.cursor() as cursor:
        ranges = initial_ranges(cursor)
        for table, key in TABLES:
            rebuild(cursor, table, key, ranges)
        cursor.execute("CREATE INDEX run_finished_early ON runs_run (finished_at) "
                       "WHERE state IN ('succeeded', 'cancelled') "
                       "AND finished_at < scheduled_at")
        cursor.execute("ANALYZE runs_run, runs_attempt, runs_logline")


def rebuild(cursor, table: str, key: str, ranges) -> None:
    """``table`` rebuilt as a table partitioned by range of ``key``, with its rows, its
    indexes and constraints (read from the catalog, so those of any earlier migration
    come along) and its id sequence's position."""
    from runs.history.time_partitions import _literal

    cursor.execute("SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE conrelid = %s::regclass AND contype IN ('p', 'u', 'f') "
                   "ORDER BY contype, conname", [table])
    constraints = cursor.fetchall()
    cursor.execute("SELECT pg_get_indexdef(i.indexrelid), i.indisunique FROM pg_index i "
                   "WHERE i.indrelid = %s::regclass AND NOT EXISTS (SELECT 1 FROM "
                   "pg_constraint c WHERE c.conindid = i.indexrelid) ORDER BY 1", [table])
    indexes = cursor.fetchall()
    for definition, unique in indexes:
        if unique and key not in definition:
            raise RuntimeError(f"{table}: a unique index without {key} cannot be kept on "
                               f"a partitioned table: {definition}")
    new = f"{table}_partitioned"
    cursor.execute(f"CREATE TABLE {new} (LIKE {table} INCLUDING DEFAULTS "
                   f"INCLUDING CONSTRAINTS) PARTITION BY RANGE ({key})")
    for bounds in ranges:
        cursor.execute(f"CREATE TABLE {table}_{bounds.suffix} PARTITION OF {new} FOR VALUES "
                       f"FROM ({_literal(bounds.lower)}) TO ({_literal(bounds.upper)})")
    cursor.execute(f"CREATE TABLE {table}_default PARTITION OF {new} DEFAULT")
    cursor.execute(f"INSERT INTO {new} SELECT * FROM {table}")
    cursor.execute(f"SELECT max(id) FROM {table}")
    [last] = cursor.fetchone()
    # Without CASCADE: a foreign key left pointing at the table stops the migration.
    cursor.execute(f"DROP TABLE {table}")
    cursor.execute(f"ALTER TABLE {new} RENAME TO {table}")
    # Partitioned tables take no identity column (PostgreSQL 15): a sequence owned by the
    # column, which Django's sequence reset finds (pg_get_serial_sequence).
    cursor.execute(f"CREATE SEQUENCE {table}_id_seq OWNED BY {table}.id")
    cursor.execute("SELECT setval(%s, %s, %s)", [f"{table}_id_seq", last or 1, last is not None])
    cursor.execute(f"ALTER TABLE {table} ALTER COLUMN id SET DEFAULT "
                   f"nextval('{table}_id_seq')")
    for name, kind, definition in constraints:
        if kind == "p":
            definition = f"PRIMARY KEY (id, {key})"
        elif kind == "u" and key not in definition:
            # Still the same rule: the key is a function of the row's run (copied from it).
            definition = definition.replace(")", f", {key})", 1)
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    for definition, _ in indexes:
        cursor.execute(definition)


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0009_alert_refs_without_constraints"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="run_scheduled_at",
            field=models.DateTimeField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="logline",
            name="run_scheduled_at",
            field=models.DateTimeField(editable=False, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="attempt",
            name="run_scheduled_at",
            field=models.DateTimeField(editable=False),
        ),
        migrations.AlterField(
            model_name="logline",
            name="run_scheduled_at",
            field=models.DateTimeField(editable=False),
        ),
        migrations.AlterField(
            model_name="attempt",
            name="run",
            field=models.ForeignKey(db_constraint=False, db_index=False,
                                    on_delete=django.db.models.deletion.CASCADE,
                                    related_name="attempts", to="runs.run"),
        ),
        migrations.AlterField(
            model_name="logline",
            name="attempt",
            field=models.ForeignKey(db_constraint=False,
                                    on_delete=django.db.models.deletion.CASCADE,
                                    related_name="log_lines", to="runs.attempt"),
        ),
        migrations.RunPython(partition),
    ]
