"""The run history in time partitions on PostgreSQL (runs/history/time_partitions.py,
docs/retention.md "Partitioned history"): the layout keeps its keys, the dispatcher creates
partitions ahead (rows beyond them moved in first), and retention drops whole expired
partitions while keeping exactly the runs the row-by-row prune keeps. SQLite keeps plain
tables."""

import itertools
import os
import subprocess
import sys
import threading
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.db import IntegrityError, connection, connections, transaction

from jobs.models import Job, Schedule
from runs.clock import db_now
from runs.execution.leases import start_attempts
from runs.history import retention
from runs.history import time_partitions as hp
from runs.models import Attempt, LogLine, Run
from tests.conftest import ROOT, database_url, flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

DAY = timedelta(days=1)


@pytest.fixture
def layout():
    """The partitions as they were before the test, put back after it (the test database
    outlives the test: a partition made for a date in the future would stay)."""
    with connection.cursor() as cursor:
        before = hp.ranges(cursor)
    yield
    with transaction.atomic(), connection.cursor() as cursor:
        for suffix in hp.detached(cursor):
            cursor.execute(f"DROP TABLE runs_logline_{suffix}, runs_attempt_{suffix}, "
                           f"runs_run_{suffix}")
        for bounds in hp.ranges(cursor):
            if bounds not in before:
                for table, _ in hp.TABLES:
                    cursor.execute(f"DROP TABLE {table}_{bounds.suffix}")
        present = hp.ranges(cursor)
        for bounds in before:
            if bounds not in present:
                hp.create_range(cursor, bounds)


def with_history(run: Run, state: str, finished_ago: timedelta | None, lines: int = 2):
    """``run`` in ``state`` (finished ``finished_ago`` before now, or not finished), with
    one attempt and ``lines`` log lines."""
    now = db_now()
    at = None if finished_ago is None else now - finished_ago
    Run.objects.filter(pk=run.pk).update(state=state, finished_at=at, attempt=1)
    attempt = Attempt.objects.create(run_id=run.pk, number=1, worker_id="w",
                                     started_at=at or now, finished_at=at, outcome="failed")
    LogLine.objects.bulk_create([
        LogLine(attempt=attempt, created_at=at or now, level=20, logger="t", message=f"{i}")
        for i in range(lines)])


def runs_at(scheduled_at, count: int) -> list[Run]:
    """``count`` runs of one new one-off job, scheduled at ``scheduled_at`` (+1 µs each)."""
    job = Job.objects.create(name="old", handler="noop", run_at=scheduled_at)
    return Run.objects.bulk_create([
        Run(job=job, scheduled_at=scheduled_at + timedelta(microseconds=i),
            run_at=scheduled_at) for i in range(count)])


def partitions_back(days: int) -> None:
    """Daily partitions (the default width) from ``days`` ago up to the oldest one, with
    the rows the DEFAULT partition held in them moved in."""
    with transaction.atomic(), connection.cursor() as cursor:
        lower = hp.floor_to_width(db_now() - days * DAY, hp.width_s())
        first = hp.ranges(cursor)[0].lower
        while lower < first:
            hp.create_range(cursor, hp.Range(lower, lower + DAY))
            lower += DAY


def partition_of(run_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM runs_run WHERE id = %s", [run_id])
        return cursor.fetchone()[0]


def test_postgresql_has_the_partitioned_layout_and_sqlite_plain_tables():
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, relkind FROM pg_class WHERE relname IN "
                       "('runs_run', 'runs_attempt', 'runs_logline')")
        kinds = dict(cursor.fetchall())
        cursor.execute("SELECT conrelid::regclass::text, pg_get_constraintdef(oid) "
                       "FROM pg_constraint WHERE contype IN ('p', 'u') AND conrelid IN "
                       "('runs_run'::regclass, 'runs_attempt'::regclass, "
                       "'runs_logline'::regclass)")
        keys = sorted(cursor.fetchall())
        cursor.execute("SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND confrelid "
                       "IN ('runs_run'::regclass, 'runs_attempt'::regclass)")
        foreign_keys_in = cursor.fetchone()[0]

    assert kinds == {"runs_run": "p", "runs_attempt": "p", "runs_logline": "p"}
    assert keys == [
        ("runs_attempt", "PRIMARY KEY (id, run_scheduled_at)"),
        ("runs_attempt", "UNIQUE (run_id, number, run_scheduled_at)"),
        ("runs_logline", "PRIMARY KEY (id, run_scheduled_at)"),
        ("runs_run", "PRIMARY KEY (id, scheduled_at)"),
        ("runs_run", "UNIQUE (job_id, scheduled_at)"),
    ]
    assert foreign_keys_in == 0
    assert hp.partitioned("default") and not hp.partitioned("sqlite")
    with connection.cursor() as cursor:  # ahead of now, as the migration made them
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
        assert hp.ranges(cursor)[-1].upper > now + 2 * DAY


def test_one_run_per_job_and_occurrence_and_one_attempt_per_number_still_hold():
    [run] = make_runs("default", 1)
    with_history(run, "dead", DAY)

    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(job_id=run.job_id, scheduled_at=run.scheduled_at,
                           run_at=run.run_at)
    with pytest.raises(IntegrityError), transaction.atomic():
        Attempt.objects.create(run_id=run.pk, number=1, worker_id="w2",
                               started_at=db_now())
    attempt = Attempt.objects.get(run_id=run.pk)
    assert attempt.run_scheduled_at == run.scheduled_at
    assert {line.run_scheduled_at for line in LogLine.objects.all()} == {run.scheduled_at}


@pytest.mark.parametrize("using", ["default", "sqlite"])
def test_a_leased_run_gets_its_attempt_with_its_runs_scheduled_at(using):
    [run] = make_runs(using, 1)

    with transaction.atomic(using=using):
        [lease] = start_attempts([run.pk], "w", 30, using)

    attempt = Attempt.objects.using(using).get(run_id=run.pk, number=lease.attempt)
    assert attempt.run_scheduled_at == run.scheduled_at
    if using == "default":  # in the partition of the same bounds as its run's
        with connection.cursor() as cursor:
            cursor.execute("SELECT tableoid::regclass::text FROM runs_attempt WHERE id = %s",
                           [attempt.pk])
            assert cursor.fetchone()[0].removeprefix("runs_attempt") == \
                partition_of(run.pk).removeprefix("runs_run")


def unindexed_partitions(cursor, index: str = "run_scheduled") -> set[str]:
    """The partitions of runs_run (DEFAULT included) with no index attached to the
    partitioned index ``index``."""
    cursor.execute("SELECT c.relname FROM pg_partition_tree('runs_run') t JOIN pg_class c "
                   "ON c.oid = t.relid WHERE t.isleaf AND NOT EXISTS (SELECT 1 FROM "
                   "pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid "
                   "WHERE i.inhparent = %s::regclass AND x.indrelid = t.relid)", [index])
    return {name for (name,) in cursor.fetchall()}


def test_create_ahead_moves_runs_beyond_the_partitions_ahead_out_of_the_default(layout):
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
    far = now + 40 * DAY
    [run] = runs_at(far, 1)
    with_history(run, "scheduled", None, lines=1)
    assert partition_of(run.pk) == "runs_run_default"

    created = hp.create_ahead(now=far)

    assert created >= 36
    assert hp.create_ahead(now=far) == 0
    # Created as partitions, or (the one the run moved into) built then attached: each
    # carries the run lists' index (docs/api.md, "Lists at scale").
    with connection.cursor() as cursor:
        assert unindexed_partitions(cursor) == set()
    assert partition_of(run.pk) == f"runs_run_{hp.Range(hp.floor_to_width(far, 86400), far).suffix}"
    assert Run.objects.get(pk=run.pk).scheduled_at == far
    assert Attempt.objects.filter(run_id=run.pk).count() == 1
    assert LogLine.objects.filter(attempt__run_id=run.pk).count() == 1
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(job_id=run.job_id, scheduled_at=far, run_at=far)


def test_two_dispatchers_creating_ahead_at_once_create_each_partition_once(layout):
    now = db_now() + 20 * DAY
    results, errors = [], []

    def create():
        try:
            results.append(hp.create_ahead(now=now))
        except Exception as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert not errors
    assert sorted(results)[0] == 0 and sorted(results)[1] > 0
    with connection.cursor() as cursor:
        present = hp.ranges(cursor)
    assert len({r.lower for r in present}) == len(present)
    assert all(a.upper == b.lower for a, b in itertools.pairwise(present))


def old_history():
    """Runs scheduled 9 days ago, in an old partition: which is which."""
    partitions_back(10)
    nine = db_now() - 9 * DAY
    ok1, ok2 = runs_at(nine, 2)  # one-off job, both succeeded 8 days ago: all go
    b_ok, b_dead = runs_at(nine + timedelta(seconds=1), 2)  # one succeeded, one dead
    [recent] = runs_at(nine + timedelta(seconds=2), 1)  # succeeded 1 day ago: stays
    [cancelled] = runs_at(nine + timedelta(seconds=3), 1)  # cancelled 8 days ago: goes
    [cron] = runs_at(nine + timedelta(seconds=4), 1)  # a cron job's: goes, the job stays
    [pending] = runs_at(nine + timedelta(seconds=5), 1)  # held (paused job): stays
    [running] = runs_at(nine + timedelta(seconds=6), 1)  # stuck running: stays
    for run in (ok1, ok2, b_ok, cron):
        with_history(run, "succeeded", 8 * DAY)
    with_history(b_dead, "dead", 8 * DAY)
    with_history(recent, "succeeded", DAY)
    with_history(cancelled, "cancelled", 8 * DAY)
    with_history(pending, "scheduled", None)
    Run.objects.filter(pk=running.pk).update(lease_expires_at=db_now() + DAY)
    with_history(running, "running", None)
    schedule = Schedule.objects.create(cron="* * * * *")
    Job.objects.filter(pk=cron.job_id).update(schedule=schedule, run_at=None)
    return locals()


def test_dropping_an_expired_partition_keeps_exactly_what_the_row_prune_keeps(layout):
    runs = old_history()
    before = retention.cutoff(7 * 86_400)
    old = partition_of(runs["ok1"].pk)
    prunable = set(retention.prunable(before).values_list("pk", flat=True))
    everything = set(Run.objects.values_list("pk", flat=True))
    jobs_before = set(Job.objects.values_list("pk", flat=True))

    pruned = retention.drop_partitions(before)

    kept = everything - prunable
    assert set(Run.objects.values_list("pk", flat=True)) == kept
    assert kept == {runs[k].pk for k in ("b_dead", "recent", "pending", "running")}
    assert (pruned.runs, pruned.attempts, pruned.log_lines) == (5, 5, 10)
    assert set(Attempt.objects.values_list("run_id", flat=True)) == kept
    assert LogLine.objects.count() == 2 * len(kept)
    gone_jobs = {runs["ok1"].job_id, runs["cancelled"].job_id}
    assert pruned.jobs == 2
    assert set(Job.objects.values_list("pk", flat=True)) == jobs_before - gone_jobs
    assert {partition_of(pk) for pk in kept} == {"runs_run_default"}
    with connection.cursor() as cursor:
        assert old not in {f"runs_run_{r.suffix}" for r in hp.ranges(cursor)}
        assert hp.detached(cursor) == []
        cursor.execute("SELECT to_regclass(%s)", [old])
        assert cursor.fetchone()[0] is None


def test_kept_runs_go_row_by_row_from_the_default_partition_once_they_expire(
        layout, settings):
    from runs.daemons.dispatcher import Dispatcher

    flush_redis()
    runs = old_history()
    retention.drop_partitions(retention.cutoff(7 * 86_400))
    # The run that had finished a day ago is now as old as the others.
    Run.objects.filter(pk=runs["recent"].pk).update(finished_at=db_now() - 8 * DAY)
    settings.SCHEDULER = {"HISTORY_RETENTION_S": 7 * 86_400}

    Dispatcher("default").round()

    assert not Run.objects.filter(pk=runs["recent"].pk).exists()
    assert Run.objects.filter(pk=runs["b_dead"].pk).exists()
    flush_redis()


def test_the_dispatcher_drops_expired_partitions_and_creates_them_ahead(layout, settings):
    from runs.daemons.dispatcher import Dispatcher

    flush_redis()
    runs = old_history()
    old = partition_of(runs["ok1"].pk)
    with connection.cursor() as cursor:  # as if a day had passed with no dispatcher
        newest = hp.ranges(cursor)[-1]
        for table, _ in hp.TABLES:
            cursor.execute(f"DROP TABLE {table}_{newest.suffix}")
    settings.SCHEDULER = {"HISTORY_RETENTION_S": 7 * 86_400}

    dispatcher = Dispatcher("default")
    dispatcher.round()
    dispatcher.finisher.join()  # the retire thread detaches

    with connection.cursor() as cursor:
        present = hp.ranges(cursor)
    assert newest in present
    assert old not in {f"runs_run_{r.suffix}" for r in present}
    assert not Run.objects.filter(pk=runs["ok1"].pk).exists()
    assert Run.objects.filter(pk=runs["b_dead"].pk).exists()
    flush_redis()



def test_prunehistory_on_tables_held_locked_says_so_and_deletes_nothing(layout):
    """An operator's prunehistory whose detach waited out LOCK_TIMEOUT gets a CommandError
    saying what held it up and what to do, not a psycopg traceback."""
    from django.core.management import CommandError, call_command

    runs = old_history()
    everything = set(Run.objects.values_list("pk", flat=True))
    url = database_url("default").replace("postgres://", "postgresql://")
    with psycopg.connect(url) as other:  # a long transaction holding the runs table
        other.execute("LOCK TABLE runs_run IN ROW EXCLUSIVE MODE")
        with pytest.raises(CommandError, match="stayed locked.*run prunehistory again"):
            call_command("prunehistory", "--older-than", str(7 * 86_400))
    assert set(Run.objects.values_list("pk", flat=True)) == everything
    assert partition_of(runs["ok1"].pk) != "runs_run_default"


@pytest.mark.slow
def test_the_migration_partitions_a_populated_database():
    params = connection.settings_dict
    name = f"migrate_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(dbname="postgres", user=params.get("USER") or "postgres",
                            host=params.get("HOST") or "127.0.0.1",
                            port=params.get("PORT") or 5432, autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url("default").rsplit("/", 1)[0] + f"/{name}"
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("DJANGO_SETTINGS_MODULE", None)

    def migrate(*target):
        subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", *target],
                       env=env, cwd=ROOT, check=True, capture_output=True)

    try:
        migrate("runs", "0009")
        with psycopg.connect(url.replace("postgres://", "postgresql://"),
                             autocommit=True) as db:
            db.execute("INSERT INTO jobs_job (name, handler, payload, queue, shard_key, "
                       "priority, status, run_at, timeout_s, max_attempts, "
                       "created_at, updated_at) VALUES ('j', 'noop', '{}', 'default', '', 5, "
                       "'active', now(), 60, 4, now(), now())")
            # 20 days ago (dead), now, 40 days ahead; each with an attempt and a log line.
            db.execute(
                "INSERT INTO runs_run (job_id, scheduled_at, run_at, jitter_s, state, queue, "
                "shard, priority, attempt, max_attempts, worker_id, created_at, error, "
                "catch_up) SELECT (SELECT id FROM jobs_job), now() + d * interval '1 day', "
                "now(), 0, s, 'default', 0, 5, 1, 4, '', now(), '', false "
                "FROM (VALUES (-20, 'dead'), (0, 'succeeded'), (40, 'scheduled')) v(d, s)")
            db.execute("INSERT INTO runs_attempt (run_id, number, worker_id, started_at, "
                       "outcome, error) SELECT id, 1, 'w', now(), 'failed', '' FROM runs_run")
            db.execute("INSERT INTO runs_logline (attempt_id, created_at, level, logger, "
                       "message) SELECT id, now(), 20, 't', 'x' FROM runs_attempt")
            before = db.execute("SELECT id, scheduled_at FROM runs_run ORDER BY id").fetchall()

        migrate()

        with psycopg.connect(url.replace("postgres://", "postgresql://"),
                             autocommit=True) as db:
            after = db.execute("SELECT id, scheduled_at, tableoid::regclass::text "
                               "FROM runs_run ORDER BY id").fetchall()
            copies = db.execute(
                "SELECT count(*) FROM runs_attempt a JOIN runs_run r ON r.id = a.run_id "
                "JOIN runs_logline l ON l.attempt_id = a.id "
                "WHERE a.run_scheduled_at = r.scheduled_at "
                "AND l.run_scheduled_at = r.scheduled_at").fetchone()[0]
            kind = db.execute("SELECT relkind FROM pg_class WHERE relname = 'runs_run'"
                              ).fetchone()[0]
            lists_index = db.execute(
                "SELECT count(*) FILTER (WHERE x.indexrelid IS NULL), count(*) FROM "
                "pg_partition_tree('runs_run') t LEFT JOIN (pg_inherits i JOIN pg_index x ON "
                "x.indexrelid = i.inhrelid AND i.inhparent = 'run_scheduled'::regclass) "
                "ON x.indrelid = t.relid WHERE t.isleaf").fetchone()
            new_id = db.execute(
                "INSERT INTO runs_run (job_id, scheduled_at, run_at, jitter_s, state, queue, "
                "shard, priority, attempt, max_attempts, worker_id, created_at, error) "
                "SELECT job_id, now() + interval '1 hour', now(), 0, 'scheduled', 'default', "
                "0, 5, 0, 4, '', now(), '' FROM runs_run LIMIT 1 RETURNING id").fetchone()[0]
    finally:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.close()

    assert kind == "p"
    missing, partitions = lists_index
    assert missing == 0 and partitions > 5  # run_scheduled on every partition (0011)
    assert [(i, s) for i, s, _ in after] == before
    assert after[0][2] == "runs_run_default" and after[2][2] == "runs_run_default"
    assert after[1][2].startswith("runs_run_p")
    assert copies == 3
    assert new_id > before[-1][0]
