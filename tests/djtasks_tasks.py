"""django.tasks task functions for tests/test_django_tasks*.py. The worker daemons the
tests start import this module by the path recorded at enqueue, as they would a project's
own ``tasks`` module."""

import asyncio
import os
import time

import redis
from django.conf import settings
from django.tasks import task
from django.tasks.signals import task_finished, task_started


def order_key() -> str:
    return f"{os.environ['SCHEDULER_REDIS_PREFIX']}:djtasks:order"


def signals_key() -> str:
    return f"{os.environ['SCHEDULER_REDIS_PREFIX']}:djtasks:signals"


def scratch() -> redis.Redis | None:
    """The plain test Redis the tests keep their notes in (SCRATCH_REDIS_URL of the test
    settings, never the cluster the cluster pair points REDIS_URL at); None in a daemon
    started with other settings, whose signals no test reads."""
    url = getattr(settings, "SCRATCH_REDIS_URL", None)
    return redis.Redis.from_url(url) if url else None


def note_signal(sender, task_result, signal, **kwargs):
    """Record ``started|finished <id> <status>`` in Redis: the worker's children send
    these signals, in another process than the test."""
    name = "started" if signal is task_started else "finished"
    if (client := scratch()) is not None:
        client.rpush(signals_key(), f"{name} {task_result.id} {task_result.status}")


task_started.connect(note_signal, dispatch_uid="tests.djtasks.started")
task_finished.connect(note_signal, dispatch_uid="tests.djtasks.finished")


@task
def noop(*args, **kwargs):
    return None


@task
def add(a, b):
    return a + b


@task(max_attempts=3)
def fail(message):
    raise ValueError(message)


@task(max_attempts=1, timeout_s=2)
def busy_loop():
    while True:
        pass


@task
async def async_double(x):
    await asyncio.sleep(0.01)
    return x * 2


@task(takes_context=True, max_attempts=3)
def fail_twice(context, label):
    """Fails on attempts 1 and 2, then returns what the context said."""
    if context.attempt < 3:
        raise RuntimeError(f"{label}: attempt {context.attempt} fails on purpose")
    return {"id": context.task_result.id, "attempt": context.attempt,
            "errors": len(context.task_result.errors)}


@task
def record(label):
    """Append ``label`` to a Redis list: the order tasks ran in."""
    scratch().rpush(order_key(), label)
    return label


@task(timeout_s=60)
def sleep_then_return(seconds, value):
    time.sleep(seconds)
    return value


@task
def returns_a_set():
    return {1, 2}


# Django's own tests/tasks fixtures, for its expectations of a backend's TaskResult.
@task(max_attempts=1)
def exits():
    raise SystemExit("This task failed due to SystemExit")


@task(max_attempts=1)
def complex_exception():
    raise ValueError(ValueError("This task failed"))


@task(takes_context=True)
def context_says(context, attempt):
    """Django's ``test_context`` task: the context is a TaskContext of this attempt."""
    from django.tasks import TaskContext

    assert isinstance(context, TaskContext)
    assert context.attempt == attempt
    return context.task_result.id


@task(cron="*/5 * * * *", timezone="Europe/Berlin", misfire_policy="skip", jitter_s=3)
def every_five_minutes():
    return "tick"


def plain_function():
    return "not a task"


@task(takes_context=True)
def sum_upstream(context, extra=0):
    """The sum of the upstream workflow nodes' results plus ``extra`` (a task node of
    tests/test_workflows_engine.py)."""
    from workflows.context import upstream_of

    return sum(upstream_of(context).values()) + extra
