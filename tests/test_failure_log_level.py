"""How the worker logs a handler's failure for the operators: an attempt that will be
retried at WARNING on one line, one the retry gives up on at ERROR with its traceback
(docs/deploy.md, "Logs"). Every failed attempt used to be a WARNING with a traceback."""

import re
import subprocess
import sys

import pytest

from runs.execution.transitions import run_refs
from runs.models import Run, RunState
from runs.worker.child import gives_up
from scheduler_core.exceptions import PermanentFailure
from tests.conftest import ROOT, daemon_env, make_runs


def task(attempt, max_attempts=3, retry=None):
    return {"run_id": 1, "job_id": 1, "handler": "h", "attempt": attempt,
            "max_attempts": max_attempts, "retry": retry}


@pytest.mark.parametrize("t, exc, retry, final", [
    (task(1), ValueError("x"), ("builtins.ValueError",), False),
    (task(3), ValueError("x"), ("builtins.ValueError",), True),
    (task(1), PermanentFailure("x"), False, True),
    (task(1), ValueError("x"), 2.0, False),  # RetryAfter(2)
    (task(1, retry='{"never_retry_on": ["ValueError"]}'), ValueError("x"),
     ("builtins.ValueError", "builtins.Exception"), True),
    (task(1, retry={"retry_on": ["KeyError"]}), ValueError("x"),
     ("builtins.ValueError", "builtins.Exception"), True),
    (task(1, retry={"retry_on": ["ValueError"]}), ValueError("x"),
     ("builtins.ValueError", "builtins.Exception"), False),
    (task(1, max_attempts=None), ValueError("x"), ("builtins.ValueError",), None),
])
def test_the_child_tells_a_last_attempt_from_one_that_is_retried(t, exc, retry, final):
    assert gives_up(t, exc, retry) is final


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_retried_attempt_is_one_warning_line_and_a_dead_one_an_error_with_traceback(rb):
    [retried] = make_runs("default", 1, handler="always_fails", max_attempts=3)
    [dead] = make_runs("default", 1, handler="always_fails", max_attempts=1)
    rb.push(run_refs(Run.objects.filter(pk__in=[retried.pk, dead.pk])))
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", "--concurrency",
         "1"], env=daemon_env("redis"), cwd=ROOT, capture_output=True, text=True,
        timeout=120)

    assert out.returncode == 0, out.stderr
    assert Run.objects.get(pk=dead.pk).state == RunState.DEAD
    assert Run.objects.get(pk=retried.pk).state == RunState.RETRYING
    lines = [line for line in out.stderr.splitlines() if " scheduler.worker run " in line]
    [warning] = [line for line in lines if f"run {retried.pk} " in line]
    [error] = [line for line in lines if f"run {dead.pk} " in line]
    assert re.search(r" WARNING scheduler\.worker run \d+ .*will be retried", warning)
    assert re.search(r" ERROR scheduler\.worker run \d+ .*failed for good", error)
    # One traceback, the dead run's, right after its line.
    assert out.stderr.count("Traceback (most recent call last)") == 1
    after = out.stderr.split(error, 1)[1]
    assert after.lstrip("\n").startswith("Traceback (most recent call last)")
