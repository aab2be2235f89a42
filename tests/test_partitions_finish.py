"""The drop of retired time partitions deferred (docs/retention.md, "Retired whole"): the
dispatcher's retention call only detaches (the runs are gone from every query), its
finisher thread drops the detached tables and deletes the one-off jobs left with no run;
a crash between the two leaves detached tables that the next pass finishes (one
finisher at a time: tests/test_finish_lease.py)."""

import psycopg
import pytest
from django.db import connection

from jobs.models import Job
from runs.history import retention
from runs.history import time_partitions as hp
from runs.models import Attempt, LogLine, Run
from tests.conftest import database_url, flush_redis
from tests.test_history_partitions import (  # noqa: F401
    layout,
    old_history,
    partition_of,
)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def table_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [name])
        return cursor.fetchone()[0] is not None


@pytest.mark.usefixtures("layout")
def test_a_crash_between_detach_and_drop_is_finished_by_the_next_pass():
    runs = old_history()
    old = partition_of(runs["ok1"].pk)
    suffix = old.removeprefix("runs_run_")
    before = retention.cutoff(7 * 86_400)
    expected = set(Run.objects.values_list("pk", flat=True)) - set(
        retention.prunable(before).values_list("pk", flat=True))

    # What a dispatcher killed after its retention call, before its finisher ran, leaves.
    retention.drop_partitions(before, finish=False)

    # Retention is done for every query: the runs and their history are gone...
    assert set(Run.objects.values_list("pk", flat=True)) == expected
    assert set(Attempt.objects.values_list("run_id", flat=True)) == expected
    assert LogLine.objects.count() == 2 * len(expected)
    # ...while the detached tables, and the one-off jobs they leave, wait for the finish.
    with connection.cursor() as cursor:
        assert suffix in hp.detached(cursor)
    assert table_exists(old)
    assert Job.objects.filter(pk=runs["ok1"].job_id).exists()

    finished = retention.finish_detached()

    assert (finished.runs, finished.attempts, finished.log_lines, finished.jobs) == (
        5, 5, 10, 2)
    with connection.cursor() as cursor:
        assert hp.detached(cursor) == []
    for table, _ in hp.TABLES:
        assert not table_exists(f"{table}_{suffix}")
    assert not Job.objects.filter(pk=runs["ok1"].job_id).exists()
    assert set(Run.objects.values_list("pk", flat=True)) == expected
    assert retention.finish_detached() == retention.Pruned()  # nothing left: a no-op


@pytest.mark.usefixtures("layout")
def test_the_dispatchers_retention_call_leaves_the_drop_to_its_finisher_thread(settings):
    from runs.daemons.dispatcher import Dispatcher

    flush_redis()
    runs = old_history()
    old = partition_of(runs["ok1"].pk)
    settings.SCHEDULER = {"HISTORY_RETENTION_S": 7 * 86_400}
    dispatcher = Dispatcher("default")

    dispatcher.round()

    assert dispatcher.finisher is not None
    dispatcher.finisher.join()
    assert not Run.objects.filter(pk=runs["ok1"].pk).exists()
    assert Run.objects.filter(pk=runs["b_dead"].pk).exists()
    assert not table_exists(old)
    assert not Job.objects.filter(pk=runs["ok1"].job_id).exists()
    with connection.cursor() as cursor:
        assert hp.detached(cursor) == []
    flush_redis()


@pytest.mark.usefixtures("layout")
def test_the_dispatchers_round_does_not_wait_for_the_detach(monkeypatch):
    """The detach waits for its locks (and, at 10 M runs, reads seconds of cold pages) in
    the retire thread: the round goes on meanwhile. A session holding a lock on the old
    partition keeps the detach waiting; keep_partitions returns with the partition still
    attached, and once the lock is let go the thread detaches and drops it. (Before,
    the round itself waited out the lock timeout and gave up.)"""
    from runs.daemons.dispatcher import Dispatcher

    flush_redis()
    runs = old_history()
    old = partition_of(runs["ok1"].pk)
    monkeypatch.setattr(hp, "LOCK_TIMEOUT", "60s")
    dispatcher = Dispatcher("default")
    with psycopg.connect(database_url("default")) as blocker:
        blocker.execute(f"LOCK TABLE {old} IN ACCESS SHARE MODE")  # a reader's lock

        dispatcher.keep_partitions(retention.cutoff(7 * 86_400))

        assert dispatcher.finisher is not None and dispatcher.finisher.is_alive()
        with connection.cursor() as cursor:  # the catalog: the tables are being locked
            cursor.execute("SELECT relispartition FROM pg_class WHERE oid = %s::regclass",
                           [old])
            assert cursor.fetchone()[0]  # still attached: the detach is waiting
        blocker.rollback()
    dispatcher.finisher.join()
    assert not Run.objects.filter(pk=runs["ok1"].pk).exists()
    assert Run.objects.filter(pk=runs["b_dead"].pk).exists()
    assert not table_exists(old)
    flush_redis()


def test_on_sqlite_the_dispatcher_keeps_no_partitions_and_warns_nothing(caplog):
    """SQLite keeps plain tables: the partition pass is skipped, not run and failed (it
    logged 'time partitions not kept this round (unrecognized token)' every minute)."""
    from runs.daemons.dispatcher import Dispatcher

    dispatcher = Dispatcher("sqlite")
    with caplog.at_level("WARNING", logger="scheduler"):
        dispatcher.keep_partitions(retention.cutoff(7 * 86_400, "sqlite"))

    assert dispatcher.finisher is None
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
