"""The built-in handler ``django_task``: how a worker's child runs a django.tasks Task
(docs/django-tasks.md, "In the worker").

It imports the module path recorded at enqueue and refuses anything that is not a
module-level Task there, calls it (``async def`` tasks on an event loop of their own),
and returns its value normalised as Django does; an exception fails the attempt, which
the scheduler retries with backoff or sends to the dead letter. ``task_started`` and
``task_finished`` are sent around each attempt in the child.
"""

from dataclasses import MISSING, fields
from datetime import UTC, datetime
from inspect import iscoroutinefunction
from traceback import format_exception

from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from jobs.registry import handler
from runs.models import Run
from scheduler_core.exceptions import PermanentFailure
from scheduler_tasks import attempt_log
from scheduler_tasks.results import HANDLER, load_task

# module path -> (Task, the sender of its signals, whether its function is async): a
# child runs the same few tasks many times, and a module-level object never changes
# within a process.
_loaded: dict[str, tuple] = {}

# TaskResult's fields with a default (only ``_return_value`` in Django 6.1), set on the
# results built by _running_result.
_DEFAULTS = {f.name: f.default for f in fields(TaskResult) if f.default is not MISSING}

# What normalize_json gives back unchanged: a no-op task's value skips the call.
_SCALARS = (str, int, float, bool, type(None))


def _load(path) -> tuple:
    entry = _loaded.get(path) if isinstance(path, str) else None
    if entry is None:
        task = load_task(path)
        entry = _loaded[path] = (task, type(task.get_backend()),
                                 iscoroutinefunction(task.func))
    return entry


def _running_result(task, run_id: int, args: list, kwargs: dict, now: datetime):
    """A RUNNING TaskResult with ``args``/``kwargs`` as decoded from the run's JSON
    payload, built without TaskResult.__init__: its __post_init__ only passes args and
    kwargs through normalize_json, which gives JSON-decoded values back unchanged, and
    per run that was most of this handler's cost (BENCHMARKS.md, "django.tasks")."""
    result = object.__new__(TaskResult)
    values = {**_DEFAULTS, "task": task, "id": str(run_id),
              "status": TaskResultStatus.RUNNING, "enqueued_at": None, "started_at": now,
              "last_attempted_at": now, "finished_at": None, "args": args,
              "kwargs": kwargs, "backend": task.backend, "errors": [], "worker_ids": []}
    for name, value in values.items():
        object.__setattr__(result, name, value)
    return result


def attempt_result(task, ctx, payload: dict) -> TaskResult:
    """The TaskResult the signals of one attempt carry: what the worker knows without a
    database read (id, args, kwargs, this attempt's start, this worker; earlier attempts'
    errors and workers are in ``refresh()``)."""
    return _running_result(task, ctx.run_id, payload.get("args", []),
                           payload.get("kwargs", {}), datetime.now(UTC))


def context_result(task, ctx) -> TaskResult:
    """The TaskResult a ``takes_context`` task gets: the run read from the database (its
    attempts so far, this one included, so ``attempt`` is Django's count), RUNNING."""
    result = task.get_backend().get_result(str(ctx.run_id))
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    return result


def _retried(ctx, exc: BaseException) -> bool:
    """Whether the scheduler retries the attempt ``exc`` ended: not a PermanentFailure,
    and attempts left on the run (read once, on failure only)."""
    if isinstance(exc, PermanentFailure):
        return False
    budget = (Run.objects.using(ctx.using).filter(pk=ctx.run_id)
              .values_list("max_attempts", flat=True).first())
    return budget is not None and ctx.attempt < budget


@handler(HANDLER, internal=True)
def django_task(ctx, payload):
    """Run the Task ``payload["task"]`` (module path) with ``payload["args"]`` and
    ``payload["kwargs"]``; returns its value through Django's normalize_json (TypeError
    for a value JSON cannot hold). Raises scheduler_tasks.exceptions.NotATask or
    ImportError for a path that is not a module-level Task."""
    task, sender, is_async = _load(payload.get("task"))
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if task.takes_context:
        result = context_result(task, ctx)
        args = [TaskContext(task_result=result), *args]
    else:
        result = attempt_result(task, ctx, payload)
    task_started.send(sender=sender, task_result=result)
    try:
        # Task.call, without its per-call iscoroutinefunction (cached in _load).
        value = task.call(*args, **kwargs) if is_async else task.func(*args, **kwargs)
        if type(value) not in _SCALARS:
            value = normalize_json(value)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a task is a failure too
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", datetime.now(UTC))
        kind = type(exc)
        result.errors.append(TaskError(
            exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
            traceback="".join(format_exception(exc))))
        token = attempt_log.retrying.set(_retried(ctx, exc))
        try:
            task_finished.send(sender=sender, task_result=result)
        finally:
            attempt_log.retrying.reset(token)
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", datetime.now(UTC))
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=sender, task_result=result)
    return value
