"""django.tasks against worker daemons (``manage.py runworker`` processes): a mix of
tasks to their ends on every broker/database pair, and a SIGKILLed worker's task
finishing on another worker on one pair, redis on PostgreSQL (what it adds is the daemon
killed; the reaped lease and WorkerLost are tested on every pair in process, in
tests/test_django_tasks.py). Public django.tasks API only, besides finding which worker
holds a run (docs/django-tasks.md)."""

import signal
from datetime import timedelta

import pytest
from django.tasks import TaskResultStatus
from django.utils import timezone

from scheduler_tasks.exceptions import TaskTimedOut, WorkerLost
from tests import djtasks_tasks as t
from tests.conftest import daemon_env, start_daemon, stop, wait_until

pytestmark = [pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
              pytest.mark.slow]


@pytest.fixture
def env(broker, settings):
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "QUEUES": [], "OPTIONS": {"DATABASE": broker.using}}}
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    return daemon_env(broker.name, broker.using, lease_ttl_s=3, dispatch_interval_s=0.1,
                      retry_backoff_base_s=0.1)


def finished(*results):
    for result in results:
        result.refresh()
    return all(result.is_finished for result in results)


def test_tasks_run_to_their_ends_in_worker_daemons(env, tmp_path):
    procs = [start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")]
    procs += [start_daemon(["runworker", "--concurrency", "2"], env, tmp_path / f"w{i}.log")
              for i in range(2)]
    try:
        later = timezone.now() + timedelta(seconds=2)
        ok, failing, looping, doubled, deferred = (
            t.add.enqueue(2, 3), t.fail.enqueue("no"), t.busy_loop.enqueue(),
            t.async_double.enqueue(4), t.add.using(run_after=later).enqueue(1, 1))
        results = [ok, failing, looping, doubled, deferred]
        wait_until(lambda: finished(*results), timeout=90, message="every task to finish")
    finally:
        stop(*procs)

    assert (ok.status, ok.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    assert (doubled.status, doubled.return_value) == (TaskResultStatus.SUCCESSFUL, 8)
    assert (deferred.return_value, deferred.started_at >= later) == (2, True)
    assert failing.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in failing.errors] == [ValueError] * 3
    assert len(failing.worker_ids) == 3
    assert looping.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in looping.errors] == [TaskTimedOut]


@pytest.mark.parametrize("broker", ["redis"], indirect=True)
def test_a_sigkilled_workers_task_finishes_on_another_worker(env, tmp_path):
    from runs.models import Run

    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    workers = {}
    for i in range(2):
        proc = start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / f"w{i}.log")
        workers[proc.pid] = proc
    try:
        result = t.sleep_then_return.enqueue(2, "done")
        wait_until(lambda: (result.refresh(), result.status)[1] == TaskResultStatus.RUNNING,
                   message="the task to start")
        holder = Run.objects.using(env_alias(env)).get(pk=int(result.id)).worker_id
        workers[int(holder.split(":")[1])].send_signal(signal.SIGKILL)
        wait_until(lambda: finished(result), timeout=60, message="the task to finish")
    finally:
        stop(dispatcher, *workers.values())

    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "done")
    assert len(result.worker_ids) == 2 and result.worker_ids[0] == holder
    assert result.worker_ids[1] != holder
    assert [e.exception_class for e in result.errors] == [WorkerLost]


def env_alias(env: dict) -> str:
    return "sqlite" if env["DATABASE_URL"].startswith("sqlite") else "default"
