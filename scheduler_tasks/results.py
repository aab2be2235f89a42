"""What a Django task's run looks like through ``django.tasks``: the payload recorded at
enqueue, the Task it names, and the TaskResult built from the run and its attempts
(docs/django-tasks.md, "Results")."""

import sys

from django.apps import apps
from django.conf import settings
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.base import Task, TaskError
from django.tasks.exceptions import InvalidTask
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from runs.models import AttemptOutcome, RunState
from scheduler_core import conf
from scheduler_tasks.exceptions import NotATask

HANDLER = "django_task"

# A run waiting for its retry is READY: Django's READY means "enqueued, or ready to be
# executed again". A cancelled or expired run never ran and never will: FAILED ("unable
# to start").
STATUS = {
    RunState.SCHEDULED: TaskResultStatus.READY,
    RunState.QUEUED: TaskResultStatus.READY,
    RunState.RETRYING: TaskResultStatus.READY,
    RunState.RUNNING: TaskResultStatus.RUNNING,
    RunState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    RunState.DEAD: TaskResultStatus.FAILED,
    RunState.CANCELLED: TaskResultStatus.FAILED,
    RunState.EXPIRED: TaskResultStatus.FAILED,
}

# Outcomes of an attempt that failed, and the exception class a TaskError names for those
# whose error is not a Python traceback of the task function.
FAILED_OUTCOMES = {
    AttemptOutcome.FAILED: None,  # the class is read from the traceback
    AttemptOutcome.TIMED_OUT: "scheduler_tasks.exceptions.TaskTimedOut",
    AttemptOutcome.CRASHED: "scheduler_tasks.exceptions.WorkerLost",
    AttemptOutcome.LEASE_EXPIRED: "scheduler_tasks.exceptions.WorkerLost",
}


def task_packages() -> set[str]:
    """The packages whose modules load_task may import: the installed apps', the settings
    module's top-level package (a project's own) and SCHEDULER TASK_PACKAGES."""
    packages = {app.name for app in apps.get_app_configs()}
    project = (settings.SETTINGS_MODULE or "").partition(".")[0]
    packages |= {name.strip() for name in conf.get("TASK_PACKAGES").split(",")} | {project}
    return packages - {""}


def _in_task_packages(module: str) -> bool:
    return any(module == package or module.startswith(package + ".")
               for package in task_packages())


def payload_of(task: Task, args: list, kwargs: dict) -> dict:
    """The job payload recorded at enqueue: the task's module path (what the worker
    imports), the arguments, and the Django fields TaskResult.task gives back where they
    differ from the module-level task's (``task`` must be one, or a ``.using()`` copy of
    one); raises InvalidTask when the task is not the module-level Task its path names,
    which the worker would refuse."""
    return {"task": task.module_path, "args": args, "kwargs": kwargs, **differences(task)}


def differences(task: Task) -> dict:
    """The part of payload_of that depends on ``task`` alone: its ``priority``,
    ``queue_name`` and ``run_after`` (ISO 8601) where they differ from the module-level
    task's. Raises InvalidTask as payload_of does."""
    # Only what differs from the module-level task: the worker reads the payload of
    # every run, so a no-op task's run costs its size (BENCHMARKS.md, "django.tasks").
    try:
        declared = load_task(task.module_path)
    except (ImportError, NotATask) as exc:
        raise InvalidTask(f"A worker could not run this task: {exc}") from None
    extra = {}
    if task.priority != declared.priority:
        extra["priority"] = task.priority
    if task.queue_name != declared.queue_name:
        extra["queue_name"] = task.queue_name
    if task.run_after is not None:
        extra["run_after"] = task.run_after.isoformat()
    return extra


def load_task(path: str) -> Task:
    """The module-level django.tasks Task at ``path`` (``module.function``); raises
    ImportError when it cannot be imported and scheduler_tasks.exceptions.NotATask when
    the object there is not a Task defined under that very path, or when its module is
    neither imported already nor inside task_packages() (it is then never imported)."""
    if not isinstance(path, str) or "." not in path or not all(
            part.isidentifier() for part in path.split(".")):
        # import_string would raise ValueError or TypeError for ".x" or "a..b"
        raise NotATask(f"{path!r} is not a module path of a task")
    module = path.rpartition(".")[0]
    if module not in sys.modules and not _in_task_packages(module):
        # Importing runs the module's code: a payload naming any module on the path
        # would have a worker run it before finding there is no Task there.
        raise NotATask(f"{path!r} is outside the packages tasks may come from (the "
                       "installed apps', the settings module's and SCHEDULER "
                       "TASK_PACKAGES): a worker imports no other module")
    obj = import_string(path)  # ImportError for a missing module or name
    if not isinstance(obj, Task) or obj.module_path != path:
        raise NotATask(f"{path!r} is not a module-level django.tasks Task")
    return obj


def task_of(payload: dict) -> Task:
    """The Task a payload names, with the priority, queue and run_after it was enqueued
    with (raises as load_task)."""
    task = load_task(payload.get("task"))
    run_after = payload.get("run_after")
    return task.using(priority=payload.get("priority", task.priority),
                      queue_name=payload.get("queue_name") or task.queue_name,
                      run_after=parse_datetime(run_after) if run_after else None)


def exception_path(traceback_text: str) -> str:
    """The exception class path in a Python traceback's last exception line
    (``ValueError: …`` → ``builtins.ValueError``; ``pkg.mod.Error: …`` as is). The line
    is the first one starting at column 0 after the last frame, so a multi-line message
    does not confuse it."""
    lines = traceback_text.rstrip("\n").splitlines()
    last_frame = max((i for i, line in enumerate(lines) if line.startswith('  File "')),
                     default=-1)
    for line in lines[last_frame + 1:]:
        if line and not line[0].isspace():
            name = line.split(":", 1)[0].strip()
            if name.replace(".", "").replace("_", "").isalnum():
                return name if "." in name else f"builtins.{name}"
            break
    return "builtins.Exception"


def task_error(outcome: str, error: str) -> TaskError:
    """The TaskError of a failed attempt (``outcome`` one of FAILED_OUTCOMES)."""
    path = FAILED_OUTCOMES.get(outcome) or exception_path(error)
    return TaskError(exception_class_path=path, traceback=error)


def build(task: Task, run: dict, attempts: list[dict], backend: str) -> TaskResult:
    """The TaskResult of ``run`` (a dict with state, created_at, finished_at, result and
    job__payload) and its ``attempts`` (dicts with worker_id, started_at, outcome, error,
    in number order)."""
    status = STATUS[run["state"]]
    payload = run["job__payload"]
    result = TaskResult(
        task=task, id=str(run["pk"]), status=status, enqueued_at=run["created_at"],
        started_at=attempts[0]["started_at"] if attempts else None,
        last_attempted_at=attempts[-1]["started_at"] if attempts else None,
        finished_at=run["finished_at"] if status in (TaskResultStatus.SUCCESSFUL,
                                                     TaskResultStatus.FAILED) else None,
        args=payload.get("args", []), kwargs=payload.get("kwargs", {}), backend=backend,
        errors=[task_error(a["outcome"], a["error"]) for a in attempts
                if a["outcome"] in FAILED_OUTCOMES],
        worker_ids=[a["worker_id"] for a in attempts],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", run["result"])
    return result
