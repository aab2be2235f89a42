"""An outcome held for the ack in flight (group commit, runs/worker/acks.py) goes out
as soon as that ack commits, even when nothing else will wake the worker."""

import threading
import time

import pytest
from django.db import connection, transaction

from jobs.registry import handler
from jobs.services import create_job
from runs.models import Run
from tests.test_pg_listen import POLL_S, serve_while

pytestmark = pytest.mark.django_db(transaction=True)


@handler("ackflush.nap")
def nap(ctx, payload):
    time.sleep(2.5)


@handler("ackflush.noop")
def noop(ctx, payload):
    return None


def wait_for(predicate, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def hold_row_lock(run_id: int, locked: threading.Event, hold_s: float, seen: list) -> None:
    """In a thread of its own: lock run ``run_id``'s row for ``hold_s`` seconds, so its
    ack waits on it; its state when locked goes to ``seen``."""
    try:
        with transaction.atomic():
            seen.append(Run.objects.select_for_update().get(pk=run_id).state)
            locked.set()
            time.sleep(hold_s)
    finally:
        connection.close()


def test_an_outcome_collected_behind_a_slow_ack_is_acked_once_that_ack_commits(settings):
    """The first run's ack waits on a row lock while the second run finishes: its
    outcome is held for the ack in flight. That ack committed and woke the worker's loop,
    which then slept (a whole WORKER_POLL_S with an idle lease waiting for work) before
    sending the held outcome: the run stayed unacked, and outside a test unheartbeated,
    its lease free to lapse. serve_while bounds the wait at a quarter poll."""
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "database",
                          "WORKER_POLL_S": POLL_S}
    seen = []

    def steps():
        first = create_job("ackflush.nap").runs.get().pk
        wait_for(lambda: Run.objects.get(pk=first).state == "running", 10,
                 "the first run did not start")
        locked = threading.Event()
        locker = threading.Thread(target=hold_row_lock, args=(first, locked, 4.0, seen))
        locker.start()
        locked.wait(5)
        create_job("ackflush.noop")
        locker.join()

    serve_while(steps, runs=2)

    assert seen == ["running"], "the first run's ack came before the lock: no race"
    assert Run.objects.filter(state="succeeded").count() == 2
