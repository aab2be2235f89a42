"""Cancelling a running run stops its handler (docs/architecture.md, "Cancelling a running
run"): real worker processes on both brokers, real PostgreSQL and Redis."""

import pytest

from jobs import services
from runs import services as run_services
from runs.brokers import get_broker
from runs.models import Attempt, LogLine, Run
from tests.conftest import daemon_env, flush_redis, start_daemon, stop, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(params=["redis", "database"])
def env(request):
    flush_redis()
    yield daemon_env(request.param, dispatch_interval_s=0.1, cancel_check_s=0.5,
                     cancel_grace_s=2)
    flush_redis()


def _cancel_when_running(job) -> Run:
    run = wait_until(lambda: Run.objects.filter(job=job, state="running").first(),
                     timeout=30, message="the run to start")
    assert run_services.cancel([run.pk]) == 1
    return run


def test_cancelling_a_running_sleep_stops_its_handler(env, tmp_path):
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / "worker.log")
    try:
        job = services.create_job("sleep", {"seconds": 8}, delay_s=0, timeout_s=60)
        run = _cancel_when_running(job)
        attempt = Attempt.objects.get(run=run)
        # Recorded at once, whatever becomes of the worker.
        assert attempt.outcome == "cancelled" and attempt.finished_at is not None
        # One child: the next run starts only once the cancelled handler has stopped.
        after = services.create_job("noop", {}, delay_s=0)
        wait_until(lambda: Run.objects.filter(job=after, state="succeeded").exists(),
                   timeout=30, message="the run queued behind the cancelled one")
        log = (tmp_path / "worker.log").read_text()
        assert f"run {run.pk} was cancelled; stopping its handler" in log
        # The sleep handler logs "slept 8.000 s" only if it ran to its end.
        messages = list(LogLine.objects.filter(attempt__run=run).values_list("message",
                                                                              flat=True))
        assert not any("slept" in m for m in messages), messages
        run.refresh_from_db()
        attempt.refresh_from_db()
        assert run.state == "cancelled"
        assert (attempt.outcome, attempt.error) == ("cancelled", "cancelled while running")
        assert worker.poll() is None
    finally:
        stop(dispatcher, worker)


def test_a_handler_that_ignores_the_cancel_is_killed_after_the_grace(env, tmp_path):
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / "worker.log")
    try:
        job = services.create_job("stubborn", {"seconds": 30}, delay_s=0, timeout_s=60)
        run = _cancel_when_running(job)
        wait_until(lambda: "ignoring the cancel" in "".join(LogLine.objects.filter(
            attempt__run=run).values_list("message", flat=True)), timeout=30,
            message="the handler's log lines, sent when its child is killed")
        log = (tmp_path / "worker.log").read_text()
        assert f"cancelled run {run.pk} still running after 2.0 s; killing its child" in log
        after = services.create_job("noop", {}, delay_s=0)
        wait_until(lambda: Run.objects.filter(job=after, state="succeeded").exists(),
                   timeout=30, message="a run on the replacement child")
        attempt = Attempt.objects.get(run=run)
        assert attempt.outcome == "cancelled" and attempt.finished_at is not None
        assert not LogLine.objects.filter(attempt=attempt, message="slept to the end").exists()
    finally:
        stop(dispatcher, worker)


def test_a_cancelled_runs_slot_is_free_once_its_handler_has_stopped(env, tmp_path):
    """The worker's ack of a cancelled run is refused; on Redis the run's slot (here the
    queue's one) was then left to the lease reaper, LEASE_TTL_S later (docs/isolation.md,
    "Concurrency limits"). Nor is the cancelled handler a failure to be retried."""
    env = {**env, "SCHEDULER_QUEUE_CONCURRENCY": "default=1"}
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", "--concurrency", "2"], env, tmp_path / "worker.log")
    try:
        job = services.create_job("sleep", {"seconds": 30}, delay_s=0, timeout_s=60)
        run = _cancel_when_running(job)
        wait_until(lambda: f"run {run.pk} cancelled (" in (tmp_path / "worker.log").read_text(),
                   timeout=30, message="the worker's report of the cancelled attempt")
        broker = get_broker("default", name=env["SCHEDULER_BROKER"])
        assert [d.leased for d in broker.depth() if d.queue == "default"] in ([], [0])
        after = services.create_job("noop", {}, delay_s=0)
        wait_until(lambda: Run.objects.filter(job=after, state="succeeded").exists(),
                   timeout=30, message="the run queued behind the cancelled one")
        log = (tmp_path / "worker.log").read_text()
        assert f"run {run.pk} (handler sleep, attempt 1) was cancelled; its handler " \
            "stopped" in log
        assert "will be retried" not in log
    finally:
        stop(dispatcher, worker)
