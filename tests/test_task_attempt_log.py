"""The console line of a failed django.tasks attempt (scheduler_tasks/attempt_log.py): a
retried one is a WARNING without a traceback, the last one an ERROR with it, where
Django's own receiver logged each at ERROR with its traceback."""

import logging
from datetime import UTC, datetime

import pytest

from runs.context import RunContext
from runs.models import Run
from scheduler_tasks.handlers import django_task
from tests import djtasks_tasks as t

pytestmark = pytest.mark.django_db


def attempt(caplog, result, number: int) -> list[logging.LogRecord]:
    """Run attempt ``number`` of ``result``'s run here; its django.tasks warnings and errors."""
    run = Run.objects.get(pk=int(result.id))
    ctx = RunContext(run_id=run.pk, job_id=run.job_id, attempt=number,
                     scheduled_at=run.scheduled_at, deadline=datetime.now(UTC),
                     handler="django_task", logger=logging.getLogger("jobs.run.test"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="django.tasks"), \
            pytest.raises(ValueError, match="boom"):
        django_task(ctx, run.job.payload)
    return [r for r in caplog.records if r.name == "django.tasks" and r.levelno >= logging.WARNING]


def test_a_retried_attempt_is_a_warning_line_and_the_last_an_error_with_traceback(caplog):
    result = t.fail.enqueue("boom")  # max_attempts=3

    first, last = attempt(caplog, result, 1), attempt(caplog, result, 3)

    assert [(r.levelno, r.exc_info) for r in first] == [(logging.WARNING, None)]
    assert "ValueError" in first[0].getMessage() and "retries" in first[0].getMessage()
    assert [r.levelno for r in last] == [logging.ERROR]
    assert last[0].exc_info is not None and last[0].exc_info[0] is ValueError
