"""The http handler's outcomes through the worker's path: the child turns RetryAfter and
PermanentFailure into what the ack records (runs/worker/child.py, retry_asked), and the
fenced transition honours them (runs/execution/transitions.py, fail_runs): the next attempt's
run_at reflects Retry-After (capped), a 404 is dead after one attempt. On every
broker/database pair; the last test runs a real worker."""

import contextvars
import json
import logging
import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from jobs import services
from runs.clock import to_us
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.outbound.payload import http_payload
from runs.types import Outcome
from runs.worker.child import CaptureHandler
from runs.worker.child_async import AsyncRunner
from tests import http_server
from tests.conftest import daemon_env, flush_redis, start_daemon, stop, wait_until
from tests.test_broker_contract import lease_one

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
LOOPBACK = http_server.LOOPBACK
server = pytest.fixture(http_server.serving)


def attempt_once(broker, url: str, max_attempts: int = 4, **options):
    """One http run leased, executed as a worker's child does (on an event loop: the
    handler is async), and acked with what the child reported; returns the run and its
    attempt afterwards."""
    payload = http_payload(url, **options)
    run, lease = lease_one(broker, handler="http", payload=payload, max_attempts=max_attempts)
    task = {"run_id": lease.run_id, "job_id": run.job_id, "attempt": lease.attempt, "seq": 1,
            "scheduled_at": to_us(run.scheduled_at), "deadline": to_us(lease.expires_at),
            "handler": "http", "payload": json.dumps(payload), "timeout_s": 60}
    sent = []

    def send(message) -> bool:
        sent.append(message)
        return True

    send.lock = threading.RLock()
    capture, root = CaptureHandler(), logging.getLogger()
    capture.routes = True
    root.addHandler(capture)  # as the child does (runs/worker/child.py, child_main)
    level, root.level = root.level, logging.INFO
    try:
        # In a copy of this thread's context: asgiref copies the run's context variables
        # back, and a later test's forked children would route their lines to this run.
        contextvars.copy_context().run(async_to_sync(AsyncRunner(-1, send, 1000).run), task)
    finally:
        root.removeHandler(capture)
        root.setLevel(level)
    _, _, _, ok, result, error, logs, _, _, retry = sent[-1]
    outcome = AttemptOutcome.SUCCEEDED if ok else AttemptOutcome.FAILED
    assert broker.complete([Outcome(lease, outcome, result, error, logs, retry=retry)]) == [True]
    run = Run.objects.using(broker.using).get(pk=run.pk)
    return run, Attempt.objects.using(broker.using).get(run=run, number=lease.attempt)


@LOOPBACK
def test_a_success_stores_the_result(broker, server):
    run, attempt = attempt_once(broker, f"{server.url}/status/200")

    assert run.state == RunState.SUCCEEDED
    assert run.result["status"] == 200 and run.result["body"] == "status 200"
    assert [line.message for line in attempt.log_lines.all()][0].startswith(
        f"http GET {server.url}/status/200 -> 200 in ")


@LOOPBACK
@pytest.mark.parametrize("route", ["/echo", "/status/503"])
def test_no_secret_header_reaches_the_logs_result_or_error(broker, server, route):
    run, attempt = attempt_once(broker, f"{server.url}{route}", response_headers=["X-Trace"],
                                headers={"Authorization": "Bearer s3cret"})

    assert server.requests[-1][2]["Authorization"] == "Bearer s3cret"  # it was sent
    lines = [line.message for line in attempt.log_lines.all()]
    assert lines and "s3cret" not in json.dumps([lines, attempt.error, run.error])
    if run.result is not None:  # /echo's body repeats the headers: only the excerpt has it
        assert set(run.result["headers"]) <= {"x-trace"}


@LOOPBACK
def test_a_503_is_retried_after_the_usual_backoff(broker, server):
    run, attempt = attempt_once(broker, f"{server.url}/status/503")

    assert run.state == RunState.RETRYING
    assert run.run_at - attempt.finished_at == timedelta(seconds=1)  # RETRY_BACKOFF_BASE_S


@LOOPBACK
def test_retry_after_sets_the_next_attempts_run_at(broker, server):
    run, attempt = attempt_once(broker, f"{server.url}/retry-after/120")

    assert run.state == RunState.RETRYING and attempt.outcome == AttemptOutcome.FAILED
    assert run.run_at - attempt.finished_at == timedelta(seconds=120)
    assert "Retry-After: retry in 120 s" in run.error


@override_settings(SCHEDULER={"HTTP_ALLOWLIST": "127.0.0.1", "HTTP_RETRY_AFTER_MAX_S": 30})
def test_a_long_retry_after_is_capped(broker, server):
    run, attempt = attempt_once(broker, f"{server.url}/retry-after/86400")

    assert run.run_at - attempt.finished_at == timedelta(seconds=30)


@override_settings(SCHEDULER={"HTTP_ALLOWLIST": "127.0.0.1", "RETRY_BACKOFF_CAP_S": 5})
def test_the_worker_caps_any_asked_delay_at_the_longest_backoff(broker, server):
    run, attempt = attempt_once(broker, f"{server.url}/retry-after/120")

    assert run.run_at - attempt.finished_at == timedelta(seconds=5)


@LOOPBACK
def test_a_404_is_dead_after_one_attempt(broker, server):
    run, attempt = attempt_once(broker, f"{server.url}/status/404", max_attempts=5)

    assert run.state == RunState.DEAD and run.attempt == 1
    assert "answered 404" in run.error and "PermanentFailure" in run.error


def test_a_refused_address_is_dead_after_one_attempt(broker, server):
    run, _ = attempt_once(broker, f"{server.url}/status/200")

    assert run.state == RunState.DEAD and "which is loopback" in run.error
    assert server.requests == []


@LOOPBACK
def test_a_stale_attempts_retry_after_changes_nothing(broker, server):
    payload = http_payload(f"{server.url}/status/200")
    run, lease = lease_one(broker, handler="http", payload=payload)
    broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED, {"status": 200})])

    stale = Outcome(lease, AttemptOutcome.FAILED, None, "late", [], retry=999)
    assert broker.complete([stale]) == [False]
    assert Run.objects.using(broker.using).get(pk=run.pk).state == RunState.SUCCEEDED


@pytest.mark.slow
def test_a_worker_retries_a_503_then_succeeds_and_dead_letters_a_404(server, tmp_path):
    flush_redis()
    env = daemon_env("redis", http_allowlist="127.0.0.1", dispatch_interval_s=0.1)
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker"], env, tmp_path / "worker.log")
    try:
        with LOOPBACK:
            flaky = services.create_job("http", {"url": f"{server.url}/flaky/1"}, delay_s=0)
            missing = services.create_job("http", {"url": f"{server.url}/status/404"},
                                          delay_s=0, max_attempts=4)
        done = wait_until(lambda: Run.objects.filter(job=flaky, state="succeeded").first(),
                          timeout=30, message="the 503-then-200 run to succeed")
        dead = wait_until(lambda: Run.objects.filter(job=missing, state="dead").first(),
                          timeout=30, message="the 404 run to die")

        assert [a.outcome for a in done.attempts.order_by("number")] == ["failed", "succeeded"]
        assert done.result["status"] == 200 and done.result["body"] == "done"
        assert dead.attempt == 1 and dead.attempts.count() == 1
    finally:
        stop(dispatcher, worker)
        flush_redis()
