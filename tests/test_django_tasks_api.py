"""What the django.tasks backend refuses at enqueue, what it stores, and the task paths a
worker refuses to run (docs/django-tasks.md). No worker runs here."""

import math
import os
import sys
from datetime import datetime, timedelta

import pytest
from django.tasks import default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.utils import timezone

from jobs import services
from jobs.models import Job
from runs.context import RunContext
from runs.models import Run
from scheduler_core.exceptions import InvalidJob
from scheduler_tasks.backend import SchedulerTask, scheduler_priority
from scheduler_tasks.exceptions import NotATask
from scheduler_tasks.handlers import django_task
from tests import djtasks_tasks as t

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_backend_claims_every_capability():
    backend = task_backends["default"]
    assert (backend.supports_defer, backend.supports_priority, backend.supports_get_result,
            backend.supports_async_task) == (True, True, True, True)
    assert isinstance(t.add, SchedulerTask)


@pytest.mark.parametrize("args, kwargs, error", [
    ([object()], {}, TypeError),
    ([{1, 2}], {}, TypeError),
    ([math.nan], {}, ValueError),
    ([], {"when": math.inf}, ValueError),
    ([{1: "int key"}], {}, ValueError),
    ([{"a": [{"b": {None: 1}}]}], {}, ValueError),
    ([], {"k": [[{2.5: "float key"}]]}, ValueError),
    ([b"\xff"], {}, ValueError),
])
def test_arguments_json_cannot_round_trip_fail_at_enqueue_and_nothing_is_stored(
        args, kwargs, error):
    with pytest.raises(error):
        t.noop.enqueue(*args, **kwargs)
    assert not Job.objects.exists() and not Run.objects.exists()


def test_the_run_records_the_tasks_options_path_and_arguments():
    result = t.fail.using(queue_name="mail", priority=100).enqueue("x", n=(1, 2))
    run = Run.objects.select_related("job").get(pk=int(result.id))

    assert (run.job.handler, run.queue, run.priority, run.max_attempts) == (
        "django_task", "mail", 0, 3)
    assert run.job.payload["task"] == "tests.djtasks_tasks.fail"
    assert run.job.payload["args"] == ["x"] and run.job.payload["kwargs"] == {"n": [1, 2]}
    assert run.job.timeout_s == 300  # DEFAULT_TIMEOUT_S
    assert Run.objects.get(pk=int(t.busy_loop.enqueue().id)).job.timeout_s == 2


def test_options_give_the_defaults_of_tasks_that_set_none(settings):
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "OPTIONS": {"MAX_ATTEMPTS": 7, "TIMEOUT_S": 12}}}
    job = Run.objects.select_related("job").get(pk=int(t.noop.enqueue().id)).job
    assert (job.max_attempts, job.timeout_s) == (7, 12)


def test_bad_options_are_refused_naming_them(settings):
    with pytest.raises(InvalidTask, match="max_attempts"):
        SchedulerTask(func=t.plain_function, max_attempts=0)
    with pytest.raises(InvalidTask, match="timeout_s"):
        SchedulerTask(func=t.plain_function, timeout_s="10")
    with pytest.raises(InvalidTask, match="misfire_policy"):
        SchedulerTask(func=t.plain_function, cron="* * * * *", misfire_policy="sometimes")
    with pytest.raises(InvalidTask, match="minute"):
        SchedulerTask(func=t.plain_function, cron="61 * * * *")
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "OPTIONS": {"RETRIES": 3}}}
    with pytest.raises(InvalidTask, match="RETRIES"):
        task_backends["default"]  # noqa: B018


def test_run_after_must_be_aware_and_becomes_the_runs_time():
    with pytest.raises(InvalidTask, match="aware"):
        t.noop.using(run_after=datetime(2030, 1, 1)).enqueue()
    when = timezone.now() + timedelta(hours=1)
    run = Run.objects.get(pk=int(t.noop.using(run_after=when).enqueue().id))
    assert run.run_at == run.scheduled_at == when


def test_the_priority_rule_is_monotonic_and_keeps_djangos_default_at_ours():
    mapped = [scheduler_priority(p) for p in range(100, -101, -1)]
    assert mapped == sorted(mapped)
    assert (mapped[0], scheduler_priority(0), mapped[-1]) == (0, 5, 9)
    assert set(mapped) == set(range(10))


def test_an_unknown_or_foreign_result_id_does_not_exist():
    plain = services.create_job("noop", {}, delay_s=0) if "noop" in _handlers() else None
    ids = ["abc", "", "99999999", None]
    if plain is not None:
        ids.append(str(Run.objects.get(job=plain).pk))
    for result_id in ids:
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)
    result = t.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        t.noop.get_result(result.id)
    assert t.add.get_result(result.id).args == [1, 2]


def _handlers():
    from jobs.registry import handler_names

    return handler_names()


def context(run_id: int = 1) -> RunContext:
    now = timezone.now()
    return RunContext(run_id=run_id, job_id=1, attempt=1, scheduled_at=now, deadline=now,
                      handler="django_task", logger=None)


@pytest.mark.parametrize("path, error", [
    ("os.path.join", NotATask),
    ("tests.djtasks_tasks.plain_function", NotATask),
    ("tests.djtasks_tasks.order_key", NotATask),
    ("tests.djtasks_tasks.no_such_task", ImportError),
    ("no_such_module.task", NotATask),  # outside the task packages: never imported
    ("tests.no_such_module.task", ImportError),
    ("noop", NotATask),
    (["tests.djtasks_tasks.noop"], NotATask),
])
def test_the_worker_runs_only_module_level_tasks(path, error):
    with pytest.raises(error):
        django_task(context(), {"task": path, "args": [], "kwargs": {}})


def test_the_worker_never_imports_a_module_outside_the_task_packages(tmp_path, monkeypatch):
    """It imported the payload's module first and checked for a Task after: any module
    on the path ran its import-time code in the worker."""
    (tmp_path / "planted_module.py").write_text(
        "import os\nos.environ['PLANTED_MODULE_RAN'] = '1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PLANTED_MODULE_RAN", raising=False)

    with pytest.raises(NotATask, match="outside the packages tasks may come from"):
        django_task(context(), {"task": "planted_module.task", "args": [], "kwargs": {}})

    assert "planted_module" not in sys.modules
    assert "PLANTED_MODULE_RAN" not in os.environ


def test_a_task_under_another_name_is_refused():
    """An alias of a Task in another module is not the Task its path names."""
    import tests.djtasks_tasks as module

    module.alias_of_add = t.add
    try:
        with pytest.raises(NotATask):
            django_task(context(), {"task": "tests.djtasks_tasks.alias_of_add",
                                    "args": [1, 2], "kwargs": {}})
    finally:
        del module.alias_of_add
    assert django_task(context(), {"task": "tests.djtasks_tasks.add", "args": [1, 2],
                                   "kwargs": {}}) == 3


def test_clients_cannot_create_django_task_jobs_through_the_api(api):
    """The REST API does not offer the internal handler: a client would run any of the
    project's tasks with arguments of its choosing."""
    body = {"handler": "django_task", "payload": {"task": "tests.djtasks_tasks.add",
                                                  "args": [1, 2], "kwargs": {}},
            "delay_s": 0}
    single = api.post("/api/jobs/", body, format="json")
    bulk = api.post("/api/jobs/bulk/", {"jobs": [body]}, format="json")

    assert single.status_code == 400 and "handler" in single.json()
    assert bulk.status_code == 400 and "django_task" in str(bulk.json())
    assert not Job.objects.exists()


def test_the_admins_add_job_form_does_not_offer_django_task():
    from jobs.admin.forms import JobCreateForm

    assert "django_task" not in dict(JobCreateForm().fields["handler"].choices)


def tasks_owned_by(settings, username: str) -> None:
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "OPTIONS": {"OWNER": username}}}


def test_with_an_owner_the_runs_are_its_and_its_bounds_apply(settings, alice):
    tasks_owned_by(settings, "alice")
    job = Run.objects.select_related("job").get(pk=int(t.noop.enqueue().id)).job
    assert job.owner_id == alice.pk

    # OWNER_HIGHEST_PRIORITY (3) bounds an owner's jobs: Django's 100 is our 0.
    with pytest.raises(InvalidTask, match="priority"):
        t.noop.using(priority=100).enqueue()
    assert Run.objects.count() == 1


def test_an_unknown_owner_is_refused_naming_it(settings):
    tasks_owned_by(settings, "nobody")
    with pytest.raises(InvalidTask, match="'nobody'"):
        t.noop.enqueue()
    assert not Job.objects.exists()


def test_a_task_the_worker_would_refuse_is_refused_at_enqueue():
    """A Task object whose path names something else (here the plain function itself)."""
    stray = SchedulerTask(func=t.plain_function)
    with pytest.raises(InvalidTask, match="not a module-level django.tasks Task"):
        stray.enqueue()
    assert not Job.objects.exists()


def test_get_result_equals_what_enqueue_returned():
    """Django's suite checks ``get_result(result.id) == result`` of a backend that stores
    results; so here, also for a task enqueued with other priority, queue and run_after."""
    later = timezone.now() + timedelta(minutes=5)
    for task in (t.add, t.add.using(priority=30, queue_name="mail", run_after=later)):
        result = task.enqueue(1, b=2)
        assert default_task_backend.get_result(result.id) == result
        assert t.add.get_result(result.id).task == task


def test_an_owner_cannot_point_its_task_run_at_another_task(settings, alice, api):
    """The REST API and the admin do not create django_task jobs; editing the payload of
    one that code enqueued for the user would run any task with any arguments all the same."""
    tasks_owned_by(settings, "alice")
    result = t.noop.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    job = Run.objects.select_related("job").get(pk=int(result.id)).job
    other = {"task": "tests.djtasks_tasks.record", "args": ["stolen"], "kwargs": {}}

    patched = api.patch(f"/api/jobs/{job.pk}/", {"payload": other}, format="json")
    assert patched.status_code == 400 and set(patched.json()) == {"payload"}, patched.json()
    with pytest.raises(InvalidJob, match="payload"):
        services.check_update(job, {"payload": other})
    assert Job.objects.get(pk=job.pk).payload["task"] == "tests.djtasks_tasks.noop"
    # The other fields stay editable.
    assert api.patch(f"/api/jobs/{job.pk}/", {"name": "n"}, format="json").status_code == 200


@pytest.mark.parametrize("enqueue", ["enqueue", "aenqueue"])
def test_a_queue_the_backend_does_not_list_is_refused_and_nothing_stored(settings, enqueue):
    """Django's test_validate_on_enqueue and test_validate_on_aenqueue (tests/tasks)."""
    from asgiref.sync import async_to_sync

    task = t.noop.using(queue_name="unknown_queue")  # valid while QUEUES is empty
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "QUEUES": ["queue-1"]}}
    call = task.enqueue if enqueue == "enqueue" else async_to_sync(task.aenqueue)
    with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
        call()
    assert not Job.objects.exists()


def test_enqueue_logs_the_enqueued_task_as_djangos_suite_expects(caplog):
    """Django's test_enqueue_logs (tests/tasks), the part in the enqueuing process: one
    DEBUG line naming the result's id (the RUNNING and SUCCESSFUL lines are the worker
    child's, from the signals tests/test_django_tasks.py checks are sent there)."""
    with caplog.at_level("DEBUG", logger="django.tasks"):
        result = t.noop.enqueue()

    lines = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    assert len(lines) == 1 and "enqueued" in lines[0] and result.id in lines[0]


def test_a_task_enqueued_before_is_checked_again_after_a_settings_change(settings):
    """The backend keeps what it worked out of a task object (SchedulerBackend.plan):
    a callback payload a new cap refuses is still refused, nothing stored."""
    import dataclasses

    noisy = dataclasses.replace(t.noop, on_success={"handler": "noop",
                                                    "payload": {"text": "x" * 300}})
    noisy.enqueue()
    settings.SCHEDULER = {**settings.SCHEDULER, "MAX_PAYLOAD_BYTES": 100}
    with pytest.raises(InvalidTask, match="on_success"):
        noisy.enqueue()
    assert Job.objects.count() == 1
