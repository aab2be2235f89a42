"""An outcome held for the ack in flight (group commit, runs/worker/acks.py) goes out
as soon as that ack commits, even when nothing else will wake the worker."""

import threading
import time

import pytest
from django.db import connection, transaction

from jobs.registry import handler
from jobs.services import create_job
from runs.models import Run
from runs.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)

POLL_S = 30.0


@handler("ackflush.nap")
def nap(ctx, payload):
    time.sleep(1.5)


@handler("ackflush.noop")
def noop(ctx, payload):
    return None


def wait_for(predicate, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def hold_row_lock(run_id: int, locked: threading.Event, hold_s: float) -> None:
    """In a thread of its own: lock run ``run_id``'s row for ``hold_s`` seconds, so its
    ack waits on it."""
    try:
        with transaction.atomic():
            Run.objects.select_for_update().get(pk=run_id)
            locked.set()
            time.sleep(hold_s)
    finally:
        connection.close()


def test_an_outcome_collected_behind_a_slow_ack_is_acked_once_that_ack_commits(settings):
    """The first run's ack waits on a row lock while the second run finishes: its
    outcome is held for the ack in flight. That ack committed and woke the worker's loop,
    which then slept (a whole WORKER_POLL_S with an idle lease waiting for work) before
    sending the held outcome: the run stayed unacked, and outside a test unheartbeated,
    its lease free to lapse. The bound is the poll's third, not a speed."""
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "database",
                          "WORKER_POLL_S": POLL_S}
    worker = Worker(["default"], concurrency=1)
    failed = []
    made = {}

    def steps():
        try:
            first = create_job("ackflush.nap").runs.get().pk
            wait_for(lambda: Run.objects.get(pk=first).state == "running", 10,
                     "the first run did not start")
            locked = threading.Event()
            locker = threading.Thread(target=hold_row_lock, args=(first, locked, 3.0))
            locker.start()
            locked.wait(5)
            second = create_job("ackflush.noop").runs.get().pk
            made.update(first=first, second=second)
            locker.join()
            wait_for(lambda: Run.objects.filter(pk__in=[first, second],
                                                state="succeeded").count() == 2,
                     POLL_S / 3, "an outcome held behind the slow ack was not acked")
        except Exception as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)
        finally:
            worker.request_stop()
            connection.close()

    thread = threading.Thread(target=steps)
    thread.start()
    worker.serve()
    thread.join()

    assert not failed, failed
    assert Run.objects.get(pk=made["second"]).state == "succeeded"
