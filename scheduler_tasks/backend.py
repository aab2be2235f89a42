"""The backend of Django's task framework on this scheduler (docs/django-tasks.md).

``SchedulerBackend`` turns ``Task.enqueue()`` into a one-off job of the built-in handler
``django_task`` (scheduler_tasks/handlers.py runs it in the worker) through the same
Python API as every other job (jobs/services.py), so the run is leased, heartbeated,
retried into the dead letter, cut off at its timeout and logged like any other, and is
pushed to the broker only after the enqueuing transaction commits.
"""

import json
import math
from dataclasses import dataclass, field, fields

from django.contrib.auth import get_user_model
from django.core.signals import setting_changed
from django.db import transaction
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued

from jobs import callback_fields, services, spec
from jobs.callback_fields import CALLBACK_FIELDS
from jobs.models import MisfirePolicy
from jobs.validation import payload_problem
from runs.execution import retry
from runs.models import Attempt, Run
from scheduler_core.exceptions import InvalidJob
from scheduler_tasks import periodic, results

HANDLER = results.HANDLER
# Most task objects whose Plan one backend keeps: a module-level task is one object, but
# each ``.using()`` makes another; past this many the plans are dropped and made again.
PLANS_MAX = 256
# Bumped by every settings change (override_settings in tests): a plan made before one
# is made again, its checks read the settings anew.
_generation = [0]


def _settings_changed(**kwargs) -> None:
    _generation[0] += 1


setting_changed.connect(_settings_changed)


@dataclass(frozen=True, slots=True)
class Plan:
    """What an enqueue of one task object needs besides its arguments, worked out once:
    the task passed validate_task; ``options`` are its create_job options (job_options)
    and ``extra`` the payload's fields of the task alone (results.differences).
    ``task`` is held so that its id, the plan's key, is not reused while it is kept."""

    task: Task
    generation: int
    options: dict
    extra: dict


def scheduler_priority(priority: int) -> int:
    """This scheduler's priority (0 most urgent .. 9 least) for Django's ``priority``
    (-100..100, larger sooner): 0 maps to the scheduler's default 5; 1..100 to 4..0 in
    steps of 20 (1-20 → 4, …, 81-100 → 0); -1..-100 to 6..9 in steps of 25 (-1..-25 → 6,
    …, -76..-100 → 9). Monotonic: a larger Django priority never runs later
    (docs/django-tasks.md, "Priority")."""
    if priority > 0:
        return 5 - math.ceil(priority / 20)
    return 5 + math.ceil(-priority / 25)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerTask(Task):
    """Django's Task with this scheduler's per-task options, given as extra ``@task(...)``
    keyword arguments (Django passes them to the backend's ``task_class``), named as the
    job spec names them (jobs/spec.py; docs/api.md, "Job fields").

    ``max_attempts`` (int ≥ 1, the first try included) and ``timeout_s`` (seconds ≥ 1):
    None takes the backend's OPTIONS, then the scheduler's DEFAULT_MAX_ATTEMPTS and
    DEFAULT_TIMEOUT_S. ``cron`` (five-field cron or macro) makes the task periodic, run
    with no arguments in ``timezone`` (IANA; ``cron_timezone`` is its deprecated name)
    with ``misfire_policy`` (run_once, run_all, skip), ``jitter_s`` and ``max_lag_s`` as
    cron jobs have them (docs/cron.md).
    ``retry`` is the retry strategy (a dict: kind, base_s, cap_s, jitter_s, retry_on,
    never_retry_on; None: RETRY_BACKOFF_BASE_S · 2^(attempt−1) seconds) and
    ``expires_in_s`` the seconds after which a run not started ends expired
    (docs/retries-and-expiry.md); Django's API has no per-enqueue option for an absolute
    ``expires_at``. ``rate_key``, ``concurrency_key`` and ``concurrency_limit`` are the
    flow keys (docs/isolation.md): a template such as ``payload.kwargs.customer_id``.
    ``on_success`` and ``on_failure`` name a handler (or give {"handler", "payload"}) run
    once when a run succeeds or ends dead or expired (docs/callbacks.md).
    """

    max_attempts: int | None = None
    timeout_s: int | None = None
    cron: str | None = None
    timezone: str = "UTC"
    misfire_policy: str | None = None
    jitter_s: int | None = None
    max_lag_s: int | None = None
    # Not compared or hashed: a dict is unhashable, and a frozen Task may be hashed.
    retry: dict | None = field(default=None, compare=False, hash=False)
    expires_in_s: int | None = None
    rate_key: str | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    on_success: str | dict | None = field(default=None, compare=False, hash=False)
    on_failure: str | dict | None = field(default=None, compare=False, hash=False)


def _positive_int(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise InvalidTask(f"{name} must be a whole number of at least 1, not {value!r}.")


def check_round_trip(args, kwargs) -> None:
    """Raise ValueError when normalised ``args``/``kwargs`` do not come back equal from
    JSON (NaN, infinities, non-text dict keys); Django's normalize_json has already
    raised TypeError for types JSON cannot hold."""
    try:
        text = json.dumps([args, kwargs], allow_nan=False)
    except ValueError as exc:
        raise ValueError(f"Task arguments must be JSON round-trippable: {exc}") from None
    if json.loads(text) != [args, kwargs]:
        raise ValueError("Task arguments must be JSON round-trippable "
                         "(dictionary keys must be strings).")


class SchedulerBackend(BaseTaskBackend):
    """``TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
    "QUEUES": [...], "OPTIONS": {...}}}``. OPTIONS: ``DATABASE`` (alias, default
    "default"), ``OWNER`` (username whose owner limits and queues the runs fall under;
    default none), ``MAX_ATTEMPTS`` and ``TIMEOUT_S`` (defaults for tasks that set none).
    Result ids are run ids as text (docs/django-tasks.md)."""

    def task_class(self, **options) -> SchedulerTask:
        """The SchedulerTask of ``@task(**options)``: the old name ``cron_timezone``
        renamed with a DeprecationWarning; an option no task takes is a TypeError naming
        it and the option probably meant."""
        known = {f.name for f in fields(SchedulerTask)}
        for name in list(options):
            if spec.renamed(name, spec.TASK) is not None:
                spec.warn_renamed(name, "@task()", stacklevel=4)
                if "timezone" in options:
                    raise TypeError(f"@task(): give timezone only ({name!r} is its "
                                    "deprecated name)")
                options["timezone"] = options.pop(name)
            elif name not in known:
                hint = spec.unknown_message(name, known - {"func", "backend"})
                raise TypeError(f"@task() got an unexpected keyword argument {name!r}"
                                + hint.removeprefix("unknown field"))
        return SchedulerTask(**options)
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        unknown = set(self.options) - {"DATABASE", "OWNER", "MAX_ATTEMPTS", "TIMEOUT_S"}
        if unknown:
            raise InvalidTask(f"Unknown OPTIONS for backend {alias!r}: {sorted(unknown)}")
        self.using = self.options.get("DATABASE", "default")
        self._plans: dict[int, Plan] = {}  # id(task) -> its Plan
        self.owner_name = self.options.get("OWNER")
        _positive_int("OPTIONS MAX_ATTEMPTS", self.options.get("MAX_ATTEMPTS"))
        _positive_int("OPTIONS TIMEOUT_S", self.options.get("TIMEOUT_S"))

    def validate_task(self, task):
        super().validate_task(task)
        _positive_int("max_attempts", getattr(task, "max_attempts", None))
        _positive_int("timeout_s", getattr(task, "timeout_s", None))
        _positive_int("expires_in_s", getattr(task, "expires_in_s", None))
        try:
            retry.clean(getattr(task, "retry", None))
        except ValueError as exc:
            raise InvalidTask(f"retry: {exc}") from None
        for name in CALLBACK_FIELDS:
            try:
                callback_fields.clean(getattr(task, name, None), payload_problem)
            except ValueError as exc:
                raise InvalidTask(f"{name}: {exc}") from None
        if getattr(task, "cron", None) is not None:
            periodic.check(task)
            if task.misfire_policy not in (None, *MisfirePolicy.values):
                raise InvalidTask(f"misfire_policy must be one of {MisfirePolicy.values}.")
            periodic.declare(task)

    def owner(self):
        """The User of OPTIONS["OWNER"], or None; raises InvalidTask naming an unknown one."""
        if self.owner_name is None:
            return None
        user = get_user_model()._default_manager.db_manager(self.using).filter(
            **{get_user_model().USERNAME_FIELD: self.owner_name}).first()
        if user is None:
            raise InvalidTask(f"OPTIONS OWNER {self.owner_name!r} is not a user.")
        return user

    def job_options(self, task) -> dict:
        """The create_job options shared by one-off and periodic runs of ``task``."""
        return {
            "name": task.module_path[-200:], "queue": task.queue_name,
            "shard_key": task.module_path[-200:],
            "priority": scheduler_priority(task.priority),
            "timeout_s": getattr(task, "timeout_s", None) or self.options.get("TIMEOUT_S"),
            "max_attempts": (getattr(task, "max_attempts", None)
                             or self.options.get("MAX_ATTEMPTS")),
            "retry": getattr(task, "retry", None),
            "expires_in_s": getattr(task, "expires_in_s", None),
            **{name: getattr(task, name, None)
               for name in ("rate_key", "concurrency_key", "concurrency_limit",
                            *CALLBACK_FIELDS)},
        }

    def plan(self, task) -> Plan:
        """The Plan of ``task``: validate_task (raising InvalidTask as it does), the job
        options and the payload's task fields, kept per task object until a settings
        change, so that enqueueing the same task again costs none of them (Django's
        Task already validated it when made, and the backend checks again at each
        enqueue as Django's own backends do). A periodic task is checked every time:
        its check declares it (scheduler_tasks/periodic.py)."""
        plan = self._plans.get(id(task))
        if plan is not None and plan.task is task and plan.generation == _generation[0]:
            return plan
        generation = _generation[0]
        self.validate_task(task)
        plan = Plan(task, generation, self.job_options(task), results.differences(task))
        if getattr(task, "cron", None) is None:
            if len(self._plans) >= PLANS_MAX:
                self._plans.clear()
            self._plans[id(task)] = plan
        return plan

    def enqueue(self, task, args, kwargs):
        """Store a run of ``task`` with ``args`` and ``kwargs`` (JSON round-trippable, as
        Django requires: Django's TypeError or ValueError otherwise, nothing stored);
        returns its READY TaskResult. Raises InvalidTask for an invalid task or a job the
        scheduler refuses (owner limits, caps), naming the field."""
        plan = self.plan(task)
        result = TaskResult(
            task=task, id="", status=TaskResultStatus.READY, enqueued_at=None,
            started_at=None, last_attempted_at=None, finished_at=None, args=args,
            kwargs=kwargs, backend=self.alias, errors=[], worker_ids=[],
        )
        check_round_trip(result.args, result.kwargs)
        # results.payload_of, its task's part from the plan
        payload = {"task": task.module_path, "args": result.args, "kwargs": result.kwargs,
                   **plan.extra}
        when = ({"run_at": task.run_after} if task.run_after is not None
                else {"delay_s": 0})  # delay 0: now on the database's clock
        try:
            job = services.create_job(HANDLER, payload, owner=self.owner(), using=self.using,
                                      **when, **plan.options)
        except InvalidJob as exc:
            raise InvalidTask(f"The scheduler refused the task: {exc}") from exc
        # The one-statement create returns its run (jobs/ingest/one_off.py); the bulk path
        # (SQLite, an owner with quotas) does not, so the run is read back.
        run = getattr(job, "created_run", None)
        run_id, created = ((run.pk, run.created_at) if run is not None else
                           Run.objects.using(self.using).filter(job_id=job.pk)
                           .values_list("pk", "created_at").get())
        object.__setattr__(result, "id", str(run_id))
        object.__setattr__(result, "enqueued_at", created)
        # Sent once the run is really enqueued: a rolled-back enqueue sends nothing.
        transaction.on_commit(lambda: task_enqueued.send(type(self), task_result=result),
                              using=self.using)
        return result

    def get_result(self, result_id):
        """The TaskResult of run ``result_id`` read from the database (status by
        results.STATUS, errors one per failed attempt); raises TaskResultDoesNotExist
        for an id that is not a run of a Django task."""
        try:
            run_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        run = (Run.objects.using(self.using).filter(pk=run_id, job__handler=HANDLER)
               .values("pk", "state", "created_at", "finished_at", "result", "job__payload")
               .first())
        if run is None:
            raise TaskResultDoesNotExist(result_id)
        attempts = list(Attempt.objects.using(self.using).filter(run_id=run_id)
                        .order_by("number")
                        .values("worker_id", "started_at", "outcome", "error"))
        try:
            task = results.task_of(run["job__payload"])
        except (ImportError, TypeError) as exc:
            raise TaskResultDoesNotExist(f"{result_id}: {exc}") from exc
        return results.build(task, run, attempts, self.alias)
