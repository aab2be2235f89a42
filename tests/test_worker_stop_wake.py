"""A stop reaches an idle worker at once (docs/architecture.md, "Daemons"): its loop
wakes on the lanes' pipe, whatever it was sleeping to."""

import threading
import time

import pytest

from jobs.registry import handler
from jobs.services import create_job
from runs.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


@handler("stopwake.noop")
def noop(ctx, payload):
    return None


@pytest.mark.parametrize("broker_name", ["redis", "database"])
def test_a_stop_wakes_a_worker_sleeping_to_its_next_run(settings, broker_name):
    """An idle worker whose next run falls due within its poll sleeps to it in its own
    loop (runs/worker/lease_ahead.py, lease_call), with no broker call in flight: a stop
    (from a thread, or a signal whose interrupted select() resumes) waited out that
    sleep, up to WORKER_POLL_S. The bound is the sleep's half, not a speed."""
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker_name,
                          "WORKER_POLL_S": 30.0}
    create_job("stopwake.noop", delay_s=20)
    worker = Worker(["default"], concurrency=1)
    stopper = threading.Timer(1.5, worker.request_stop)
    began = time.monotonic()
    stopper.start()
    worker.serve()
    stopper.join()

    assert time.monotonic() - began < 10, "the stop waited for the next run's time"


@handler("stopwake.nap")
def nap(ctx, payload):
    time.sleep(2.0)


@pytest.mark.parametrize("child_acks", [True, False])
def test_a_worker_stopped_while_its_run_finishes_ends_once_the_run_is_acked(settings,
                                                                            child_acks):
    """Stopped during a run: the run finishes, its ack goes out, and the loop ends. The
    ack's answer woke one round; the next, holding nothing any more, waited out a whole
    WORKER_POLL_S for a wake-up that nothing would send. The stop comes a second into
    the run's two; the bound is the poll's third, not a speed."""
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "database",
                          "WORKER_POLL_S": 30.0, "WORKER_CHILD_ACKS": child_acks}
    job = create_job("stopwake.nap")
    worker = Worker(["default"], concurrency=1)
    stopper = threading.Timer(1.0, worker.request_stop)
    began = time.monotonic()
    stopper.start()
    worker.serve()
    stopper.join()

    assert job.runs.get().state == "succeeded"
    assert time.monotonic() - began < 10, "the stopping worker waited out its poll"
