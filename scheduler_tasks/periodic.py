"""Periodic django.tasks: a ``@task(cron=...)`` is kept as one cron job of the handler
``django_task``, brought in line with the code each time a scheduler starts
(docs/django-tasks.md, "Periodic tasks").

The cron job of a task is the active or paused job of handler ``django_task`` named
``periodic:<module path>`` on the backend's database (and owner). At start the scheduler
imports every installed app's ``tasks`` module; then, under one lock, each declared task's
job is created if missing, updated in place if its schedule or options changed (never a
second job), recreated if its queue or owner changed, and the jobs of tasks no longer
declared are cancelled.
"""

import logging

from django.db import connections, transaction
from django.tasks.exceptions import InvalidTask
from django.utils.module_loading import autodiscover_modules

from jobs import services
from jobs.models import Job
from jobs.schedules import cron
from jobs.validation import validate_job
from scheduler_core import conf
from scheduler_tasks.results import HANDLER, load_task, payload_of

# Under "scheduler", the logger a project configures for the daemons (docs/django-tasks.md):
# as "scheduler_tasks.periodic" the start-up sync was silent in a project of its own.
log = logging.getLogger("scheduler.tasks")
PREFIX = "periodic:"
# pg_advisory_xact_lock key of the sync: two schedulers starting at once must not both
# create a task's job.
LOCK_KEY = 0x5C4ED7A5
_declared: dict[str, object] = {}


def check(task) -> None:
    """Raise InvalidTask for a periodic ``task`` whose cron expression or timezone is
    invalid, or that takes arguments it cannot be given (takes_context is fine)."""
    try:
        cron.normalize(task.cron)
        cron.zone(task.timezone)
    except (TypeError, ValueError) as exc:
        raise InvalidTask(f"{task.module_path}: {exc}") from None
    if task.run_after is not None:
        raise InvalidTask("A periodic task takes its times from its cron, not run_after.")


def declare(task) -> None:
    """Remember ``task`` (a SchedulerTask with ``cron``) as declared in the code."""
    _declared[task.module_path] = task


def declared(using: str) -> dict[str, object]:
    """The periodic tasks of the code, by job name, whose backend stores runs in
    ``using``: each app's ``tasks`` module is imported first, and only the module-level
    Task under each path counts (not a ``.using()`` copy)."""
    autodiscover_modules("tasks")
    found = {}
    for path in list(_declared):
        try:
            task = load_task(path)
        except (ImportError, TypeError):
            continue
        if getattr(task, "cron", None) and getattr(task.get_backend(), "using", None) == using:
            found[PREFIX + path] = task
    return found


def spec_of(task) -> dict:
    """The validated job spec (jobs.validation.validate_job) of periodic ``task``."""
    backend = task.get_backend()
    spec = {**backend.job_options(task), "name": PREFIX + task.module_path,
            "handler": HANDLER, "payload": payload_of(task, [], {}), "cron": task.cron,
            "timezone": task.timezone, "misfire_policy": task.misfire_policy,
            "jitter_s": task.jitter_s}
    if task.max_lag_s is not None:
        spec["max_lag_s"] = task.max_lag_s
    spec["timeout_s"] = spec["timeout_s"] or conf.get("DEFAULT_TIMEOUT_S")
    spec["max_attempts"] = spec["max_attempts"] or conf.get("DEFAULT_MAX_ATTEMPTS")
    return validate_job(spec)


def _fields(clean: dict) -> dict:
    """A validated spec as create_jobs takes it: the job fields, not validation's own
    serialised payload (create_jobs refuses a key that is not a job field)."""
    return {key: value for key, value in clean.items() if key != "payload_json"}


UPDATED_FIELDS = ("payload", "cron", "timezone", "misfire_policy", "max_lag_s", "jitter_s",
                  "priority", "timeout_s", "max_attempts")


def _current(job) -> dict:
    s = job.schedule
    return {"payload": job.payload, "cron": s.cron, "timezone": s.timezone,
            "misfire_policy": s.misfire_policy, "max_lag_s": s.max_lag_s,
            "jitter_s": s.jitter_s, "priority": job.priority, "timeout_s": job.timeout_s,
            "max_attempts": job.max_attempts}


def sync(using: str = "default") -> dict[str, list[str]]:
    """Bring the periodic tasks' cron jobs on database ``using`` in line with the code;
    returns the task paths {"created": [...], "updated": [...], "cancelled": [...]}.
    Raises InvalidJob (naming the field) for a declaration the scheduler refuses; then
    nothing changes."""
    tasks = declared(using)
    done = {"created": [], "updated": [], "cancelled": []}
    with transaction.atomic(using=using):
        if connections[using].vendor == "postgresql":
            with connections[using].cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        live = (Job.objects.using(using).select_related("schedule")
                .filter(handler=HANDLER, name__startswith=PREFIX)
                .exclude(status=Job.Status.CANCELLED).order_by("pk"))
        by_name: dict[str, list] = {}
        for job in live:
            by_name.setdefault(job.name, []).append(job)
        stale = [job.pk for name, jobs in by_name.items() if name not in tasks for job in jobs]
        for name, task in tasks.items():
            spec, backend = spec_of(task), task.get_backend()
            owner = backend.owner()
            jobs = by_name.get(name, [])
            keep = next((j for j in jobs if j.queue == spec["queue"]
                         and j.owner_id == (owner.pk if owner else None)), None)
            stale += [j.pk for j in jobs if j is not keep]
            if keep is None:
                services.create_jobs([_fields(spec)], owner=owner, using=using)
                done["created"].append(task.module_path)
                continue
            current = _current(keep)
            changes = {f: spec[f] for f in UPDATED_FIELDS if spec.get(f) != current[f]}
            if changes:
                services.update_job(keep.pk, changes, using=using)
                done["updated"].append(task.module_path)
        if stale:
            names = dict(Job.objects.using(using).filter(pk__in=stale)
                         .values_list("pk", "name"))
            services.cancel(stale, using=using)
            done["cancelled"] = sorted({names[pk][len(PREFIX):] for pk in stale
                                        if names[pk][len(PREFIX):] not in tasks})
    return done


def sync_on_start(sender, using: str = "default", **kwargs) -> None:
    """Receiver of jobs.schedules.scheduler.scheduler_starting: sync(using), logged."""
    done = sync(using)
    if any(done.values()):
        log.info("periodic tasks: created %s, updated %s, cancelled %s",
                 done["created"], done["updated"], done["cancelled"])
