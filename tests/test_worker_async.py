"""Runs of ``async def`` handlers (docs/async-handlers.md): many at once on one child's
event loop, with the timeouts, retries, log lines and fenced acks of sync runs. Real
workers on every broker/database pair."""

import asyncio
import logging
import os
import threading
import time

import pytest
from django.contrib.auth.models import User
from django.db import connections

from jobs import services as jobs_services
from jobs.registry import handler
from runs import services
from runs.clock import db_now
from runs.execution.transitions import run_refs
from runs.models import Attempt, AttemptOutcome, Run
from runs.outbound.payload import http_payload
from runs.worker import Worker
from tests import http_server
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

log = logging.getLogger("tests.async")


@handler("async.nap")
async def nap(ctx, payload):
    """Sleep ``payload["s"]`` seconds on the loop; the wall-clock span it slept and the
    child it ran in are its result."""
    began = time.time()
    await asyncio.sleep(payload["s"])
    return {"began": began, "ended": time.time(), "pid": os.getpid()}


@handler("sync.stamp")
def stamp(ctx, payload):
    return {"pid": os.getpid()}


@pytest.fixture
def pair(broker, settings):
    """``broker``, and the worker's broker the same (settings.SCHEDULER["BROKER"])."""
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    return broker


def push(broker, runs) -> None:
    broker.push(run_refs(Run.objects.using(broker.using).filter(pk__in=[r.pk for r in runs])))


def results(broker, runs) -> list:
    return list(Run.objects.using(broker.using).filter(pk__in=[r.pk for r in runs])
                .values_list("state", "result"))


@pytest.mark.slow
def test_fifty_async_runs_overlap_in_one_child(pair):
    broker = pair
    runs = make_runs(broker.using, 50, handler="async.nap", payload={"s": 1})
    push(broker, runs)
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()

    done = results(broker, runs)
    assert {state for state, _ in done} == {"succeeded"}
    spans = [result for _, result in done]
    assert len({span["pid"] for span in spans}) == 1
    # All fifty were asleep at once: the last to start began before the first ended.
    assert max(s["began"] for s in spans) < min(s["ended"] for s in spans)


@handler("async.log_then_sleep")
async def log_then_sleep(ctx, payload):
    """Log a line, then sleep ``payload["s"]`` seconds (past any timeout given)."""
    ctx.logger.info("run %s going to sleep", ctx.run_id)
    await asyncio.sleep(payload["s"])
    return "woke"


@pytest.mark.slow
def test_an_async_run_past_its_timeout_is_cut_off_and_its_neighbour_runs_on(pair):
    broker = pair
    [late] = make_runs(broker.using, 1, handler="async.log_then_sleep", payload={"s": 60},
                       timeout_s=1, max_attempts=1)
    [ontime] = make_runs(broker.using, 1, handler="async.nap", payload={"s": 2})
    push(broker, [late, ontime])
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()

    attempt = Attempt.objects.using(broker.using).get(run_id=late.pk)
    assert attempt.outcome == AttemptOutcome.TIMED_OUT
    assert "timed out after 1 s" in attempt.error
    assert list(attempt.log_lines.values_list("message", flat=True)) == [
        f"run {late.pk} going to sleep"]
    # The same child went on: the timeout cancelled one coroutine, not the process.
    [(state, result)] = results(broker, [ontime])
    assert state == "succeeded" and result["began"] < result["ended"]
    assert Attempt.objects.using(broker.using).get(run_id=ontime.pk).outcome == "succeeded"


@handler("async.fail_once")
async def fail_once(ctx, payload):
    await asyncio.sleep(0.01)
    if ctx.attempt == 1:
        raise ValueError("not yet")
    return {"attempt": ctx.attempt}


def test_an_async_failure_is_retried_with_its_error_kept(pair, settings):
    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "RETRY_BACKOFF_BASE_S": 0.1}
    [run] = make_runs(broker.using, 1, handler="async.fail_once", max_attempts=3)
    push(broker, [run])
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    time.sleep(0.2)  # the retry's backoff, then its promotion (the dispatcher's part)
    broker.promote()
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()

    attempts = list(Attempt.objects.using(broker.using).filter(run_id=run.pk)
                    .order_by("number").values_list("outcome", "error"))
    assert attempts == [("failed", "ValueError: not yet"), ("succeeded", "")]
    assert results(broker, [run]) == [("succeeded", {"attempt": 2})]


@handler("async.chatty")
async def chatty(ctx, payload):
    """Log lines between awaits, from the coroutine, a module logger and a thread it
    starts, while other runs of it log on the same loop."""
    for step in range(3):
        ctx.logger.info("run %s step %s", ctx.run_id, step)
        await asyncio.sleep(payload["s"])
    await asyncio.to_thread(log.warning, "run %s from a thread", ctx.run_id)
    return None


@pytest.mark.parametrize("s", [0.01, 0.2])  # 0.2 s a step: past LOG_STREAM_S, streamed
def test_each_async_run_keeps_its_own_log_lines(pair, s):
    broker = pair
    runs = make_runs(broker.using, 10, handler="async.chatty", payload={"s": s})
    push(broker, runs)
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()

    for run in runs:
        attempt = Attempt.objects.using(broker.using).get(run_id=run.pk)
        assert attempt.outcome == AttemptOutcome.SUCCEEDED
        lines = list(attempt.log_lines.order_by("created_at", "pk")
                     .values_list("message", flat=True))
        assert lines == [f"run {run.pk} step {i}" for i in range(3)] + [
            f"run {run.pk} from a thread"]


@handler("async.blocks_the_loop")
async def blocks_the_loop(ctx, payload):
    time.sleep(payload["s"])  # a sync call in a coroutine: the loop cannot cancel it


@pytest.mark.slow
def test_an_async_run_that_blocks_its_loop_past_its_timeout_has_its_child_killed(pair):
    broker = pair
    [run] = make_runs(broker.using, 1, handler="async.blocks_the_loop", payload={"s": 30},
                      timeout_s=1, max_attempts=1)
    push(broker, [run])
    worker = Worker(["default"], concurrency=1, using=broker.using, burst=True)
    worker.serve()

    attempt = Attempt.objects.using(broker.using).get(run_id=run.pk)
    assert attempt.outcome == AttemptOutcome.TIMED_OUT
    assert "its child was killed" in attempt.error


def test_sync_and_async_runs_share_a_worker(pair):
    broker = pair
    naps = make_runs(broker.using, 20, handler="async.nap", payload={"s": 0.2})
    stamps = make_runs(broker.using, 20, handler="sync.stamp")
    push(broker, naps + stamps)
    Worker(["default"], concurrency=2, using=broker.using, burst=True).serve()

    assert {state for state, _ in results(broker, naps + stamps)} == {"succeeded"}


def test_a_cancelled_async_run_stops_and_its_neighbours_go_on(pair, settings, capfd):
    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "CANCEL_CHECK_S": 0.2}
    # The children's lines to the operators, to fd 2, where capfd reads them.
    stderr = logging.StreamHandler(os.fdopen(os.dup(2), "w", buffering=1))
    logging.getLogger("scheduler.worker").addHandler(stderr)
    [victim] = make_runs(broker.using, 1, handler="async.log_then_sleep", payload={"s": 60})
    others = make_runs(broker.using, 3, handler="async.nap", payload={"s": 1.5})
    push(broker, [victim, *others])

    def cancel() -> None:
        try:
            services.cancel([victim.pk], using=broker.using)
        finally:
            connections.close_all()  # this thread's

    timer = threading.Timer(0.7, cancel)
    timer.start()
    try:
        Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    finally:
        timer.join()
        logging.getLogger("scheduler.worker").removeHandler(stderr)
        stderr.stream.close()

    attempt = Attempt.objects.using(broker.using).get(run_id=victim.pk)
    assert attempt.outcome == AttemptOutcome.CANCELLED
    # Told as what it is, not as a failure that will be retried.
    said = capfd.readouterr().err
    assert f"run {victim.pk} (handler async.log_then_sleep, attempt 1) was cancelled" in said
    assert "will be retried" not in said
    assert list(attempt.log_lines.values_list("message", flat=True)) == [
        f"run {victim.pk} going to sleep"]
    assert {state for state, _ in results(broker, others)} == {"succeeded"}


@pytest.mark.slow
def test_http_runs_wait_together_on_one_childs_loop(pair, settings):
    """The built-in http handler is async: ten requests to an endpoint answering after
    1 s are all waiting at the server at once, from one child."""
    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "HTTP_ALLOWLIST": "127.0.0.1"}
    server = http_server.start()
    try:
        runs = make_runs(broker.using, 10, handler="http",
                         payload=http_payload(f"{server.url}/slow/1"))
        push(broker, runs)
        Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    finally:
        http_server.stop(server)

    done = results(broker, runs)
    assert {state for state, _ in done} == {"succeeded"}
    assert {result["body"] for _, result in done} == {"late"}
    assert server.peak == 10


def test_an_async_runs_lease_is_heartbeated_while_it_awaits(pair, settings):
    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "LEASE_TTL_S": 1.2}
    [run] = make_runs(broker.using, 1, handler="async.nap", payload={"s": 2.5})
    push(broker, [run])
    seen = []

    def read_lease() -> None:  # past the first lease's 1.2 s, while the run still awaits
        try:
            seen.append(Run.objects.using(broker.using).filter(pk=run.pk)
                        .values_list("lease_expires_at", flat=True).get())
            seen.append(db_now(broker.using))
        finally:
            connections.close_all()  # this thread's

    timer = threading.Timer(1.9, read_lease)
    timer.start()
    try:
        Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    finally:
        timer.join()

    expires, now = seen
    assert expires > now
    assert results(broker, [run])[0][0] == "succeeded"


def test_an_http_runs_secret_header_is_opened_in_the_child(pair, settings):
    """The handler reads its job's owner with the ORM's async API, on the child's event
    loop, to open a sealed header: it reaches the server in the clear."""
    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "HTTP_ALLOWLIST": "127.0.0.1"}
    owner = User.objects.db_manager(broker.using).create_user("alice")
    server = http_server.start()
    try:
        job = jobs_services.create_job(
            "http", {"url": f"{server.url}/echo", "headers": {"Authorization": "Bearer s3"}},
            owner=owner, using=broker.using)
        assert "encrypted_headers" in job.payload
        broker.promote()
        Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    finally:
        http_server.stop(server)

    [(state, result)] = Run.objects.using(broker.using).filter(job=job).values_list(
        "state", "result")
    assert state == "succeeded", result
    assert server.requests[-1][2]["Authorization"] == "Bearer s3"


LIVE = [0]  # async.count runs awaiting at once in this child


@handler("async.count")
async def count_live(ctx, payload):
    """How many runs of it were awaiting in this child when it started (itself included)."""
    LIVE[0] += 1
    try:
        seen = LIVE[0]
        await asyncio.sleep(payload["s"])
        return seen
    finally:
        LIVE[0] -= 1


@pytest.mark.parametrize("s", [0, 0.05])  # no-ops are leased ahead of the loop's room
def test_a_child_runs_at_most_its_limit_of_async_runs_at_once(pair, settings, s):
    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "ASYNC_CONCURRENCY_PER_CHILD": 10}
    runs = make_runs(broker.using, 300, handler="async.count", payload={"s": s})
    push(broker, runs)
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()

    done = results(broker, runs)
    assert {state for state, _ in done} == {"succeeded"}
    assert max(seen for _, seen in done) <= 10
    if s:
        assert max(seen for _, seen in done) == 10  # and the loop was kept full
