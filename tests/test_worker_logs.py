"""The log of an attempt that never returns: a handler cut off by its timeout, or whose
process dies, keeps the lines it logged before (docs/architecture.md, "runworker").
In-process workers on real PostgreSQL and Redis."""

import logging
import os
import time

import pytest

from jobs.registry import handler
from runs.execution.transitions import run_refs
from runs.models import Attempt, AttemptOutcome, Run
from runs.worker import Worker
from scheduler_core import conf
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True)

log = logging.getLogger("tests.stuck")


@handler("tests.log_then_hang")
def log_then_hang(ctx, payload):
    """Log two lines, then hang past any timeout."""
    ctx.logger.info("step 1 of %s", payload["name"])
    log.warning("step 2: about to wait for a service that never answers")
    time.sleep(60)


@handler("tests.log_then_die")
def log_then_die(ctx, payload):
    """Log a line, work a little, then kill the child process."""
    ctx.logger.info("loading %s", payload["name"])
    time.sleep(payload["work_s"])
    os._exit(3)


def run_one(broker, handler_name: str, payload: dict, **options) -> Attempt:
    [run] = make_runs("default", 1, handler=handler_name, payload=payload, max_attempts=1,
                      **options)
    broker.push(run_refs(Run.objects.filter(pk=run.pk)))
    Worker(["default"], concurrency=1, burst=True).serve()
    return Attempt.objects.get(run_id=run.pk)


def test_a_timed_out_attempt_keeps_what_its_handler_logged(rb):
    attempt = run_one(rb, "tests.log_then_hang", {"name": "report"}, timeout_s=2)

    assert attempt.outcome == AttemptOutcome.TIMED_OUT
    lines = list(attempt.log_lines.order_by("created_at").values_list("level", "message"))
    assert lines == [(logging.INFO, "step 1 of report"),
                     (logging.WARNING, "step 2: about to wait for a service that never "
                                       "answers")]


def test_a_crashed_attempt_keeps_what_its_handler_logged_before_the_crash(rb):
    attempt = run_one(rb, "tests.log_then_die", {"name": "a big file", "work_s": 1.0})

    assert attempt.outcome == AttemptOutcome.CRASHED
    assert list(attempt.log_lines.values_list("message", flat=True)) == [
        "loading a big file"]


def test_short_runs_still_bring_their_lines_with_their_outcome(rb):
    runs = make_runs("default", 50, handler="echo", payload={"x": 1})
    rb.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
    Worker(["default"], concurrency=2, burst=True).serve()

    attempts = Attempt.objects.filter(run__in=runs)
    assert set(attempts.values_list("outcome", flat=True)) == {AttemptOutcome.SUCCEEDED}
    counts = {a.pk: a.log_lines.count() for a in attempts}
    assert set(counts.values()) == {1}, counts


@handler("tests.log_a_lot_slowly")
def log_a_lot_slowly(ctx, payload):
    """Log ``payload["n"]`` lines over about 0.75 s, so most of them are streamed."""
    for i in range(payload["n"]):
        ctx.logger.info("line %d", i)
        if i % 100 == 0:
            time.sleep(0.05)


def test_the_cap_on_lines_counts_the_streamed_ones_too(rb):
    cap = conf.get("MAX_LOG_LINES")
    attempt = run_one(rb, "tests.log_a_lot_slowly", {"n": cap + 500})

    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    messages = list(attempt.log_lines.order_by("id").values_list("message", flat=True))
    assert messages[:cap] == [f"line {i}" for i in range(cap)]
    assert messages[cap:] == [f"500 more log lines dropped (the cap is {cap} per attempt)"]


@handler("tests.log_a_lot_then_hang")
def log_a_lot_then_hang(ctx, payload):
    """Log ``payload["n"]`` lines, then hang past any timeout."""
    for i in range(payload["n"]):
        ctx.logger.info("line %d", i)
    time.sleep(60)


def test_a_timed_out_attempt_over_the_cap_says_lines_were_dropped(rb):
    # Found by an adversarial review: the note came only with a run's outcome.
    cap = conf.get("MAX_LOG_LINES")
    attempt = run_one(rb, "tests.log_a_lot_then_hang", {"n": cap + 500}, timeout_s=2)

    assert attempt.outcome == AttemptOutcome.TIMED_OUT
    messages = list(attempt.log_lines.order_by("id").values_list("message", flat=True))
    assert messages[:cap] == [f"line {i}" for i in range(cap)]
    assert messages[cap:] == [f"500 more log lines dropped (the cap is {cap} per attempt)"]


def test_a_line_past_the_cap_is_counted_without_being_formatted():
    # Found by an adversarial review: emit formatted every line (a traceback for
    # log.exception) before looking at the cap, so a handler logging errors in a loop
    # past it paid ~150 µs a line.
    from runs.worker.child import CaptureHandler

    class Unformattable(logging.LogRecord):
        def getMessage(self):
            raise AssertionError("formatted a line past the cap")

    capture = CaptureHandler(max_lines=1)
    capture.reset(1)
    capture.emit(logging.LogRecord("t", logging.INFO, __file__, 1, "kept", None, None))
    capture.emit(Unformattable("t", logging.ERROR, __file__, 1, "dropped", None, None))

    assert [line[3] for line in capture.finish()] == [
        "kept", "1 more log lines dropped (the cap is 1 per attempt)"]
