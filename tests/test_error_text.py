"""What a run's owner is told of a handler's exception: its type and message, never the
traceback, whose frames name the server's files; the worker logs the traceback for the
operators (docs/security.md, "What a tenant sees of an error")."""

import subprocess
import sys

import pytest

from runs.execution.transitions import run_refs
from runs.models import Attempt, Run, RunState
from runs.worker.child import error_text
from tests.conftest import ROOT, daemon_env, make_runs


class Declined(Exception):
    pass


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")


@pytest.mark.parametrize("exc, text", [
    (ValueError("boom"), "ValueError: boom"),
    (KeyError("k"), "KeyError: 'k'"),
    (Declined("card 4242 declined"), "tests.test_error_text.Declined: card 4242 declined"),
    (RuntimeError(), "RuntimeError"),
    (Unprintable(), "tests.test_error_text.Unprintable: <exception str() failed>"),
])
def test_the_error_is_the_exceptions_type_and_message(exc, text):
    assert error_text(exc) == text


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_failed_run_keeps_no_traceback_and_the_worker_logs_it(rb):
    """Run errors, and the alerts and webhooks made of them, carried the whole traceback
    with the server's install paths to the run's owner."""
    [run] = make_runs("default", 1, handler="always_fails", max_attempts=1)
    rb.push(run_refs(Run.objects.filter(pk=run.pk)))
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", "--concurrency",
         "1"], env=daemon_env("redis"), cwd=ROOT, capture_output=True, text=True,
        timeout=120)

    assert out.returncode == 0, out.stderr
    run = Run.objects.get(pk=run.pk)
    [attempt] = Attempt.objects.filter(run=run)
    expected = "jobs.handlers.HandlerFailure: always_fails always fails"
    assert run.state == RunState.DEAD
    assert run.error == attempt.error == expected
    assert "Traceback (most recent call last)" in out.stderr
    assert str(ROOT) in out.stderr  # the operators' copy names the files
