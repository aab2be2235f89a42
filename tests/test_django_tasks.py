"""Django's task framework on this scheduler, through the public django.tasks API only:
enqueue, aenqueue, get_result, refresh, return_value, errors, signals, takes_context
(docs/django-tasks.md). What Django's own suite (tests/tasks) checks of a backend's
TaskResult is checked here too, adapted where the backend is asynchronous: the result
is READY at enqueue and finished only after a worker ran it. Workers here are in-process
Worker objects forking real children, on every broker/database pair;
tests/test_django_tasks_workers.py starts worker daemons."""

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.signals import task_enqueued
from django.utils import timezone

from runs.models import Attempt, Run
from runs.worker import Worker
from scheduler_tasks.exceptions import TaskTimedOut, WorkerLost
from tests import djtasks_tasks as t
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def tasks(broker, settings):
    """The backend on the broker/database pair of ``broker``, retries 50 ms apart."""
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "QUEUES": [], "OPTIONS": {"DATABASE": broker.using}}}
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name, "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


def waiting(broker) -> int:
    """Runs the broker holds ready or delayed (the database broker's working set is the
    committed rows, so uncommitted ones are not counted there either)."""
    broker._known_at = float("-inf")  # the Redis broker caches the shards it has seen
    return sum(d.ready + d.delayed for d in broker.depth())


def drain(broker, *results, concurrency: int = 2):
    """Run burst workers until every result is finished (a retry waits for its backoff,
    and a burst worker stops when nothing is ready); then refresh them."""
    def finished():
        broker.promote()  # a dispatcher's work: retries and deferred runs fall due
        Worker(["default"], concurrency=concurrency, using=broker.using, burst=True).serve()
        for result in results:
            result.refresh()
        return all(result.is_finished for result in results)

    wait_until(finished, timeout=60, interval=0.05, message="the tasks to finish")


def test_a_task_runs_in_a_worker_and_its_result_reads_the_run(tasks):
    result = t.add.enqueue(1, b=2)

    assert result.status == TaskResultStatus.READY
    assert result.is_finished is False
    assert result.enqueued_at is not None
    assert result.started_at is None and result.finished_at is None
    assert result.args == [1] and result.kwargs == {"b": 2}
    assert result.task == t.add
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY

    drain(tasks, result)

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at
    assert result.last_attempted_at == result.started_at
    assert result.attempts == 1 and len(result.worker_ids) == 1 and result.errors == []
    again = t.add.get_result(result.id)
    assert (again.status, again.return_value, again.args, again.kwargs) == (
        TaskResultStatus.SUCCESSFUL, 3, [1], {"b": 2})


def test_task_started_and_finished_are_sent_in_the_worker(tasks):
    """tests/djtasks_tasks.py's receivers note each signal in Redis, from the child."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.SCRATCH_REDIS_URL)
    client.delete(t.signals_key())
    ok, bad = t.noop.enqueue(), t.fail.enqueue("x")
    drain(tasks, ok, bad)

    noted = [x.decode() for x in client.lrange(t.signals_key(), 0, -1)]
    assert noted.count(f"started {ok.id} RUNNING") == 1
    assert noted.count(f"finished {ok.id} SUCCESSFUL") == 1
    assert noted.count(f"started {bad.id} RUNNING") == 3
    assert noted.count(f"finished {bad.id} FAILED") == 3


def test_a_failing_task_reaches_the_dead_letter_with_one_error_per_attempt(tasks):
    result = t.fail.enqueue("boom")
    drain(tasks, result)

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert Run.objects.using(tasks.using).get(pk=int(result.id)).state == "dead"
    assert result.attempts == 3 and len(result.errors) == 3
    for error in result.errors:
        assert error.exception_class is ValueError
        assert error.traceback.endswith("ValueError: boom\n"), error.traceback
    assert result.finished_at >= result.last_attempted_at >= result.started_at


def test_takes_context_gives_the_attempt_and_the_task_result(tasks):
    result = t.fail_twice.enqueue("ctx")
    drain(tasks, result)

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"id": result.id, "attempt": 3, "errors": 2}
    assert [e.exception_class for e in result.errors] == [RuntimeError, RuntimeError]
    assert result.errors[1].traceback.endswith("RuntimeError: ctx: attempt 2 fails on purpose\n")


def test_a_busy_loop_is_cut_off_at_its_timeout(tasks):
    result = t.busy_loop.enqueue()
    drain(tasks, result)

    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is TaskTimedOut
    assert Attempt.objects.using(tasks.using).get(run_id=int(result.id)).outcome == "timed_out"


def test_async_tasks_and_aenqueue(tasks):
    from asgiref.sync import async_to_sync

    result = async_to_sync(t.async_double.aenqueue)(21)
    fetched = async_to_sync(default_task_backend.aget_result)(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.args == [21]
    drain(tasks, result)

    assert result.return_value == 42
    async_to_sync(fetched.arefresh)()
    assert fetched.return_value == 42


def test_a_return_value_json_cannot_hold_fails_the_attempt_as_django_does(tasks):
    result = t.returns_a_set.enqueue()
    drain(tasks, result)

    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


def test_run_after_defers_the_run(tasks):
    run_after = timezone.now() + timedelta(seconds=1.5)
    result = t.noop.using(run_after=run_after).enqueue()

    run = Run.objects.using(tasks.using).get(pk=int(result.id))
    assert run.run_at == run.scheduled_at == run_after
    tasks.promote()
    Worker(["default"], concurrency=1, using=tasks.using, burst=True).serve()
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert default_task_backend.get_result(result.id).task.run_after == run_after

    drain(tasks, result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at >= run_after


def test_larger_priorities_run_first(tasks, settings):
    """With one priority class (PRIORITY_CLASSES empty) priority is strict; the default
    classes share leases by weight (docs/django-tasks.md, "Priority")."""
    import redis

    settings.SCHEDULER = {**settings.SCHEDULER, "PRIORITY_CLASSES": ""}
    client = redis.Redis.from_url(settings.SCRATCH_REDIS_URL)
    client.delete(t.order_key())
    results = [t.record.using(priority=p).enqueue(f"p{p}") for p in (-100, -30, 0, 30, 100)]
    drain(tasks, *results, concurrency=1)

    assert [x.decode() for x in client.lrange(t.order_key(), 0, -1)] == [
        "p100", "p30", "p0", "p-30", "p-100"]


def test_enqueue_in_a_transaction_is_pushed_and_signalled_only_after_commit(tasks):
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        with pytest.raises(RuntimeError), transaction.atomic(using=tasks.using):
            t.noop.enqueue()
            raise RuntimeError("roll back")
        assert seen == [] and not Run.objects.using(tasks.using).exists()

        with transaction.atomic(using=tasks.using):
            result = t.noop.enqueue()
            assert seen == []
            if tasks.name == "redis":  # the database broker's working set is the table
                assert waiting(tasks) == 0
        assert seen == [result.id]
        assert waiting(tasks) == 1
    finally:
        task_enqueued.disconnect(receiver)


def test_a_dead_task_requeued_from_the_dead_letter_runs_again(tasks):
    """The admin's and the API's requeue (runs.services.requeue) works on a task's run:
    its result becomes READY again and keeps the errors of the attempts before."""
    from runs import services

    result = t.fail.enqueue("again")
    drain(tasks, result)
    assert result.status == TaskResultStatus.FAILED

    assert services.requeue([int(result.id)], using=tasks.using) == 1
    result.refresh()
    assert result.status == TaskResultStatus.READY and len(result.errors) == 3
    drain(tasks, result)
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == len(result.worker_ids) == 6


def test_a_system_exit_and_a_nested_exception_fail_as_djangos_suite_expects(tasks):
    """Django's test_catches_exception and test_complex_exception (tests/tasks), adapted:
    the error is the worker's attempt, read back by refresh()."""
    exits, nested = t.exits.enqueue(), t.complex_exception.enqueue()
    drain(tasks, exits, nested)

    for result in (exits, nested):
        assert result.status == TaskResultStatus.FAILED
        with pytest.raises(ValueError, match="Task failed"):
            result.return_value  # noqa: B018
        assert result.finished_at >= result.started_at >= result.enqueued_at
        assert (result.args, result.kwargs) == ([], {})
    assert exits.errors[0].exception_class is SystemExit
    assert exits.errors[0].traceback.endswith(
        "SystemExit: This task failed due to SystemExit\n"), exits.errors[0].traceback
    assert nested.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in nested.errors[0].traceback


def test_the_context_is_a_task_context_of_the_attempt_as_djangos_suite_expects(tasks):
    """Django's test_context and test_takes_context (tests/tasks)."""
    result = t.context_says.enqueue(1)
    drain(tasks, result)

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == result.id


def test_a_task_whose_worker_stopped_heartbeating_finishes_on_another_worker(tasks):
    # The in-process half, on every pair, of test_django_tasks_workers.py's SIGKILLed
    # worker (which runs real daemons on one pair): a lease never heartbeated is reaped
    # and the task finishes on the next worker, with the lost attempt as WorkerLost.
    result = t.sleep_then_return.enqueue(0, "done")
    tasks.promote()
    [lost] = tasks.lease(["default"], 1, "w:0:lost", ttl_s=0.2)
    assert lost.run_id == int(result.id)
    time.sleep(0.4)
    assert tasks.reap() == 1

    drain(tasks, result)

    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "done")
    assert len(result.worker_ids) == 2 and result.worker_ids[0] == "w:0:lost"
    assert result.worker_ids[1] != "w:0:lost"
    assert [e.exception_class for e in result.errors] == [WorkerLost]
