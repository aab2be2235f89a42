"""One finisher of detached history partitions at a time, by a lease row rather than a
session-level advisory lock (runs/history/named_leases.py, retention.finish_detached),
so that it holds through PgBouncer in transaction mode: in scripts/test's PgBouncer lane
these tests run through a real PgBouncer (docs/scaling.md, "PgBouncer")."""

import threading

import pytest
from django.db import connection, connections

from runs.history import named_leases as leases
from runs.history import retention
from runs.history import time_partitions as hp
from runs.models import NamedLease
from tests.test_history_partitions import (  # noqa: F401
    layout,
    old_history,
    partition_of,
)
from tests.test_partitions_finish import table_exists

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("layout")]


def detached_history() -> str:
    """Old history detached and not finished (what a dispatcher's retention call leaves);
    returns the run partition's table name."""
    runs = old_history()
    old = partition_of(runs["ok1"].pk)
    retention.drop_partitions(retention.cutoff(7 * 86_400), finish=False)
    return old


def during_the_finish(monkeypatch, step) -> list:
    """Calls ``step()`` once while a finisher is at work (as it starts on its first
    detached partition); returns the list its result is appended to."""
    results = []
    count_detached = retention._count_detached

    def counting(*args, **kwargs):
        if not results:
            results.append(step())
        return count_detached(*args, **kwargs)

    monkeypatch.setattr(retention, "_count_detached", counting)
    return results


def in_another_thread(work):
    """``work()`` run in a thread of its own, as another dispatcher's finisher would: on
    a connection of its own (another PgBouncer client in the PgBouncer lane)."""
    result = []

    def run():
        try:
            result.append(work())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result[0]


def test_two_finishers_cannot_work_at_once(monkeypatch):
    old = detached_history()
    # The second finisher starts while the first is at work, on its own connection.
    seen = during_the_finish(monkeypatch, lambda: in_another_thread(
        lambda: (retention.finish_detached(), table_exists(old))))

    first = retention.finish_detached()

    assert seen == [(retention.Pruned(), True)]  # left alone: nothing pruned, nothing dropped
    assert (first.runs, first.attempts, first.log_lines, first.jobs) == (5, 5, 10, 2)
    assert not table_exists(old)
    # Given back at the end: the next finisher takes it at once.
    assert NamedLease.objects.get(name=hp.FINISH_LEASE).holder == ""
    assert leases.take(hp.FINISH_LEASE, "next", 60)


def test_finishing_holds_no_session_state(monkeypatch):
    """Nothing a server session keeps past a transaction: through PgBouncer the next
    statement may run on another session. (Before, a session-level advisory lock was held
    across the whole finish.)"""
    detached_history()

    def session_locks():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
                           "database = (SELECT oid FROM pg_database "
                           "WHERE datname = current_database())")
            return cursor.fetchone()[0]

    seen = during_the_finish(monkeypatch, session_locks)

    assert retention.finish_detached().runs == 5
    assert seen == [0]


def test_a_live_lease_of_another_holder_leaves_the_partitions_alone():
    old = detached_history()
    assert leases.take(hp.FINISH_LEASE, "other-host:1:a", hp.FINISH_LEASE_S)

    assert retention.finish_detached() == retention.Pruned()
    assert table_exists(old)

    assert leases.release(hp.FINISH_LEASE, "other-host:1:a")
    assert retention.finish_detached().runs == 5
    assert not table_exists(old)


def test_a_lease_held_by_a_dead_holder_expires():
    old = detached_history()
    assert leases.take(hp.FINISH_LEASE, "dead-host:1:a", hp.FINISH_LEASE_S)
    assert retention.finish_detached() == retention.Pruned()
    # The holder died and never gave it back; FINISH_LEASE_S later (database clock):
    NamedLease.objects.filter(name=hp.FINISH_LEASE).update(
        expires_at=NamedLease.objects.get(name=hp.FINISH_LEASE).expires_at
        - hp.FINISH_LEASE_S * 1.01 * retention.seconds(1))

    assert retention.finish_detached().runs == 5
    assert not table_exists(old)
    assert not leases.release(hp.FINISH_LEASE, "dead-host:1:a")  # no longer its


def test_a_holder_that_lost_its_lease_stops(monkeypatch):
    """A step that outlasted the lease: another holder took it meanwhile, so this one
    stops before its next step and leaves the rest to the new holder."""
    old = detached_history()
    during_the_finish(monkeypatch, lambda: NamedLease.objects.filter(
        name=hp.FINISH_LEASE).update(holder="new-host:1:a"))

    retention.finish_detached()

    assert table_exists(old)  # not dropped by the holder that lost it
    assert NamedLease.objects.get(name=hp.FINISH_LEASE).holder == "new-host:1:a"


@pytest.mark.parametrize("name, holder, ttl_s, field", [
    ("", "h", 1, "name"), ("x" * 65, "h", 1, "name"), ("n", "", 1, "holder"),
    ("n", "h", 0, "ttl_s"), ("n", "h", float("nan"), "ttl_s")])
def test_a_bad_lease_request_is_refused_naming_the_field(name, holder, ttl_s, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        leases.take(name, holder, ttl_s)
    assert not NamedLease.objects.exists()
