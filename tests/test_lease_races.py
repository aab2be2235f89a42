"""Races between transactions on PostgreSQL that the contract's process race can miss:
a second transaction that waits on the first one's row lock must see the new row."""

import threading
import time

import pytest
from django.db import connections, transaction

from jobs import services as job_services
from runs import services as run_services
from runs.execution.leases import start_attempts
from runs.models import Attempt, Run, RunState
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True)


def race(first, second, hold_s: float = 0.5) -> dict:
    """Run ``first`` in a transaction that holds its locks for ``hold_s`` seconds, and
    ``second`` in another transaction started while ``first`` holds them."""
    results, started = {}, threading.Event()

    def one():
        with transaction.atomic():
            results["first"] = first()
            started.set()
            time.sleep(hold_s)
        connections.close_all()

    def two():
        started.wait(10)
        with transaction.atomic():
            results["second"] = second()
        connections.close_all()

    threads = [threading.Thread(target=one), threading.Thread(target=two)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_a_worker_waiting_on_a_lock_cannot_start_a_run_another_worker_just_started():
    [r] = make_runs("default", 1)
    Run.objects.filter(pk=r.pk).update(state=RunState.QUEUED)

    results = race(lambda: start_attempts([r.pk], "worker-A", 30, "default"),
                   lambda: start_attempts([r.pk], "worker-B", 30, "default"))

    assert [le.attempt for le in results["first"]] == [1]
    assert results["second"] == []
    assert list(Attempt.objects.filter(run=r).values_list("number", "worker_id")) == [
        (1, "worker-A")]


def test_a_run_cancelled_while_a_worker_waits_is_not_started():
    [r] = make_runs("default", 1)
    Run.objects.filter(pk=r.pk).update(state=RunState.QUEUED)

    results = race(lambda: run_services.cancel([r.pk]),
                   lambda: start_attempts([r.pk], "worker-B", 30, "default"))

    assert results == {"first": 1, "second": []}
    assert Run.objects.get(pk=r.pk).state == RunState.CANCELLED


def test_a_failed_run_of_a_cancelled_job_ends_cancelled_not_stuck():
    from runs.brokers import get_broker
    from runs.types import Outcome

    broker = get_broker("default", name="database")
    [r] = make_runs("default", 1)
    broker.promote()
    [lease] = broker.lease(["default"], 1, "w1")
    job_services.cancel([r.job_id])

    broker.complete([Outcome(lease, "failed", error="boom")])
    broker.reap()

    assert Run.objects.get(pk=r.pk).state == RunState.CANCELLED
