"""The Python API for other Django code: create, bulk-create, pause, resume, cancel and
trigger jobs. The REST API and the admin call these same functions.

Everything happens in one transaction on the database alias ``using``; runs reach the
broker only after it commits (docs/architecture.md, "Conventions in the code")."""

from datetime import datetime

import psycopg
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs import flow_keys, retry_fields, tenants
from jobs.guards import refuse_managed
from jobs.ingest import bulk as ingest
from jobs.ingest import one_off
from jobs.ingest.checking import InvalidJobs, validate_specs
from jobs.models import Job
from jobs.schedules import cron, pausing
from jobs.spec import CREATE_JOB, CREATE_JOBS, NAMES, translate, unknown_message
from jobs.validation import moment_problem, validate_job
from runs import tracing
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.clock import db_now
from runs.models import PENDING_STATES, Run, RunState
from runs.outbound.redact import redacted
from runs.types import RunRef
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob, SchedulerError
from scheduler_core.registry import creatable_handler_names

# Creates retried when a concurrent create took a unique key first (jobs/ingest/unique.py).
UNIQUE_RETRIES = 2


def _spec(handler, payload, *, name=None, run_at=None, delay_s=None, cron=None,
          timezone="UTC", queue=None, shard_key="", priority=None, timeout_s=None,
          max_attempts=None, misfire_policy=None, max_lag_s=None, jitter_s=None,
          unique_key=None, unique_period_s=None, unique_states=None, retry=None,
          expires_at=None, expires_in_s=None, rate_key=None, concurrency_key=None,
          concurrency_limit=None, on_success=None, on_failure=None) -> dict:
    spec = {  # a None option takes validate_specs's default
        "name": name, "handler": handler, "payload": {} if payload is None else payload,
        "run_at": run_at, "delay_s": delay_s, "cron": cron, "timezone": timezone,
        "queue": queue, "shard_key": shard_key, "priority": priority, "timeout_s": timeout_s,
        "max_attempts": max_attempts, "misfire_policy": misfire_policy, "unique_key": unique_key,
        "unique_period_s": unique_period_s, "unique_states": unique_states, "retry": retry,
        "expires_at": expires_at, "expires_in_s": expires_in_s, "rate_key": rate_key,
        "concurrency_key": concurrency_key, "concurrency_limit": concurrency_limit,
        "on_success": on_success, "on_failure": on_failure}
    if max_lag_s is not None:
        spec["max_lag_s"] = max_lag_s
    if jitter_s is not None:
        spec["jitter_s"] = jitter_s
    return spec


def _check_options(options: dict) -> dict:
    """create_job's options in the job spec's names (jobs/spec.py): its old names
    (cron_expr, timezone_name) renamed with a DeprecationWarning. Raises a TypeError naming
    create_job, the option and the name meant, as Python does for a wrong keyword."""
    translated, errors = translate(options, CREATE_JOB, "create_job()", stacklevel=3)
    for name, reason in errors.items():
        if not reason.startswith("unknown field"):
            raise TypeError(f"create_job(): {name}: {reason}")
        hint = reason.removeprefix("unknown field")
        raise TypeError(f"create_job() got an unexpected keyword argument {name!r}{hint}")
    return translated


def create_job(handler: str, payload: dict | None = None, *, owner=None, using="default",
               **options) -> Job:
    """Create one job and, for a one-off job, its run.

    Options (the job spec's fields, jobs/spec.py; docs/api.md, "Job fields"): ``name``;
    at most one of ``run_at`` (aware datetime; in the past means now), ``delay_s``
    (seconds from now) or ``cron`` (five-field cron or macro) with ``timezone`` (IANA,
    default UTC), ``misfire_policy``, ``max_lag_s`` and ``jitter_s``; ``queue``
    (default: the owner's OwnerPolicy.default_queue, else "default"), ``shard_key`` (what
    the shard is hashed from; default the handler), ``priority`` (0-9, 0 most urgent,
    default 5), ``timeout_s`` (seconds), ``max_attempts`` (first try included); without
    ``run_at``, ``delay_s`` or ``cron`` the job runs once now (docs/api.md, "Create");
    ``unique_key`` with ``unique_period_s`` and ``unique_states`` (jobs/ingest/unique.py): when
    an earlier job holds the key, that job is returned, with ``conflict`` True (a new job
    has it False); ``retry`` (a dict: runs/execution/retry.py), ``expires_at`` (one-off jobs) or
    ``expires_in_s`` (runs/execution/expiry.py); ``rate_key``, ``concurrency_key``,
    ``concurrency_limit`` (jobs/flow_keys.py); ``on_success``, ``on_failure`` (a handler
    name or {"handler", "payload"}: docs/callbacks.md). With an ``owner``, its bounds apply
    (see create_jobs). The old names ``cron_expr`` and ``timezone_name`` still work this
    release, with a DeprecationWarning. Raises InvalidJob naming each bad field,
    tenants.QuotaExceeded; TypeError for an option it does not take, naming the one meant.
    """
    job_spec = _spec(handler, payload, **_check_options(options))
    bounds = tenants.bounds_of(owner.pk if owner is not None else None, using)
    try:
        cleaned = validate_specs([job_spec], bounds)
    except InvalidJobs as exc:
        raise InvalidJob(exc.item_errors[0]) from None
    if one_off.applies(cleaned, bounds, using):
        return one_off.create_one(cleaned[0], owner, bounds, using)
    return _insert_validated(cleaned, owner, bounds, using)[0]


def create_jobs(specs: list[dict], *, owner=None, using: str = "default"
                ) -> ingest.CreatedJobs:
    """Create many jobs in one transaction, all or nothing.

    Each spec is a dict of the job spec's fields (jobs/spec.py; docs/api.md, "Job
    fields"); a key that is not one is an error naming it and the field probably meant.
    Raises InvalidJobs with every bad item's index before storing anything.
    With an ``owner`` (a user), its bounds apply (jobs/tenants.py; docs/isolation.md,
    "Tenant bounds"): a queue it was not given, a priority, timeout_s or max_attempts
    beyond its limits are field errors, and going over its jobs or pending runs quota
    raises tenants.QuotaExceeded; without one, none do. A spec whose ``unique_key`` an
    earlier job holds creates nothing: its place in the answer is that job, with
    ``conflict`` True (jobs/ingest/unique.py; every job returned has ``conflict``).

    The answer is a sequence of Job instances (saved, owner and schedule cached), each
    made when first read; its ``ids`` (one per spec) and ``conflicts`` (indexes answered
    by a holder) are plain lists that make none (jobs/ingest/bulk.py, CreatedJobs).
    Built for ingest peaks (BENCHMARKS.md, "Ingest (W1)"):
    the caps are read once, each payload serialised once, each distinct (cron, timezone)
    pair's next occurrence computed once, and on PostgreSQL the rows go in by COPY, built
    straight from the validated specs (jobs/ingest/bulk.py).
    """
    bounds = tenants.bounds_of(owner.pk if owner is not None else None, using)
    translated, errors = _translate_specs(specs)
    try:
        cleaned = validate_specs(translated, bounds)
    except InvalidJobs as exc:
        for i, fields in exc.item_errors.items():
            errors[i] = {**fields, **errors.get(i, {})}
    if errors:
        raise InvalidJobs(dict(sorted(errors.items())))
    return _insert_validated(cleaned, owner, bounds, using)


def _translate_specs(specs: list[dict]) -> tuple[list[dict], dict[int, dict[str, str]]]:
    """The specs with an unknown key (or one that is not a dict) taken out and named in
    the errors by index: a key create_jobs would otherwise ignore ("schedule" for "cron")
    left a recurring job one-off, due at once."""
    translated, errors = [], {}
    if not isinstance(specs, list | tuple):
        raise InvalidJobs({0: {"specs": "must be a list of dicts of job fields"}})
    for i, item in enumerate(specs):
        if not isinstance(item, dict):
            errors[i] = {"spec": "must be a dict of job fields (docs/api.md, \"Job fields\")"}
            item = {}
        fields, unknown = translate(item, CREATE_JOBS, "create_jobs()", stacklevel=3)
        if unknown:
            errors[i] = unknown
        translated.append(fields)
    return translated, errors


def _insert_validated(cleaned: list[dict], owner, bounds, using: str) -> ingest.CreatedJobs:
    for retry in range(UNIQUE_RETRIES, -1, -1):
        try:
            return ingest.insert(cleaned, owner, bounds, using)
        except (IntegrityError, psycopg.IntegrityError):
            # A concurrent create took one of these unique keys first (jobs/ingest/unique.py):
            # the next try finds its job. Other constraint errors are not ours to retry.
            if not retry or not any(s.get("unique_key") for s in cleaned):
                raise
    raise AssertionError("unreachable")


def _set_status(job_ids, from_states, to_state, using) -> list[int]:
    jobs = Job.objects.using(using).filter(pk__in=list(job_ids), status__in=from_states)
    ids = list(jobs.select_for_update().values_list("pk", flat=True))
    Job.objects.using(using).filter(pk__in=ids).update(status=to_state, paused_at=None,
                                                       updated_at=timezone.now())
    return ids


def pause(job_ids, using: str = "default") -> int:
    """Pause active jobs: no run of theirs starts until resume (jobs/schedules/pausing.py, rules
    in docs/cron.md). Returns how many jobs were paused. Raises guards.ManagedJob (nothing
    paused) when one is a workflow's node (docs/workflows.md, "Node jobs")."""
    refuse_managed(job_ids, "paused", using)
    return pausing.pause(job_ids, using)


def resume(job_ids, using: str = "default", catch_up: str = "skip") -> int:
    """Resume paused jobs. ``catch_up`` says which runs scheduled while paused run:
    ``skip`` (none, the default), ``latest`` or ``all`` within the schedule's max lag;
    the held ones that do not end ``cancelled`` with the reason (jobs/schedules/pausing.py,
    docs/cron.md). Raises InvalidJob for another ``catch_up``, guards.ManagedJob for a
    workflow's node (nothing resumed). Returns how many jobs were resumed."""
    refuse_managed(job_ids, "resumed", using)
    return pausing.resume(job_ids, catch_up, using)


def cancel(job_ids, using: str = "default") -> int:
    """Cancel jobs and their pending runs (a run already running finishes). Returns how
    many jobs were cancelled. Raises guards.ManagedJob (nothing cancelled) when one is a
    workflow's node (docs/workflows.md, "Node jobs")."""
    refuse_managed(job_ids, "cancelled", using)
    with transaction.atomic(using=using):
        ids = _set_status(job_ids, [Job.Status.ACTIVE, Job.Status.PAUSED],
                          Job.Status.CANCELLED, using)
        Run.objects.using(using).filter(job_id__in=ids, state__in=PENDING_STATES).update(
            state=RunState.CANCELLED, finished_at=db_now(using)
        )
    return len(ids)


def trigger(job_id: int, using: str = "default", at: datetime | None = None) -> Run:
    """Create one run of an active job now (database clock) or at ``at``; returns it.
    Raises SchedulerError if the job is paused or cancelled, tenants.QuotaExceeded if its
    owner has ``max_pending`` runs waiting already, guards.ManagedJob (a SchedulerError)
    for a workflow's node (docs/workflows.md, "Node jobs")."""
    refuse_managed([job_id], "triggered", using)
    broker = get_broker(using)
    with transaction.atomic(using=using):
        job = Job.objects.using(using).select_for_update().get(pk=job_id)
        if job.status != Job.Status.ACTIVE:
            raise SchedulerError(f"job {job_id} is {job.status}; only active jobs can be triggered")
        if at is not None and (not isinstance(at, datetime) or timezone.is_naive(at)
                               or moment_problem(at)):
            raise InvalidJob({"at": "must be an aware datetime between 1970 and 9998"})
        bounds = tenants.bounds_of(job.owner_id, using)
        if bounds is not None:
            tenants.check_quotas(bounds, 0, 1, using)
        when = at or db_now(using)
        if Run.objects.using(using).filter(job=job, scheduled_at=when).exists():
            raise SchedulerError(f"job {job_id} already has a run at {when.isoformat()}")
        run = Run.objects.using(using).create(
            job=job, scheduled_at=when, run_at=when, queue=job.queue,
            shard=shard_of(job.shard_source, conf.get("SHARDS")), priority=job.priority,
            max_attempts=job.max_attempts, trace_context=tracing.enqueued(job.handler))
        broker.push_after_commit(
            [RunRef(run.pk, run.queue, run.shard, run.priority, when, job.owner_id)])
    return run


UPDATABLE = frozenset({"name", "payload", "run_at", "cron", "timezone", "misfire_policy",
                       "max_lag_s", "jitter_s", "priority", "timeout_s", "max_attempts"})
SCHEDULE_FIELDS = frozenset({"cron", "timezone", "misfire_policy", "max_lag_s", "jitter_s"})


def update_job(job_id: int, changes: dict, using: str = "default") -> Job:
    """Change some fields of a job in one transaction, all or nothing; returns the job.

    ``changes`` uses ``validate_job``'s keys (a subset of UPDATABLE): the merged job must
    pass every rule a new job passes. A recurring job takes ``cron``, ``timezone``,
    ``misfire_policy``, ``max_lag_s`` and ``jitter_s`` (for runs created afterwards); a
    new cron or timezone recomputes ``next_run_at`` from the database's now and cancels
    the runs the old schedule had materialised ahead of time (still ``scheduled``, never
    attempted, in the future). A
    one-off job takes ``run_at`` while its run has not started: that run is cancelled and a
    new one created at the new time (a run already in the broker is never moved, so it
    cannot start early). ``priority``, ``timeout_s`` and ``max_attempts`` apply to runs
    created afterwards; ``payload`` to every run not yet started (workers read it then).

    The job owner's bounds (jobs/tenants.py) apply to the changed ``priority``,
    ``timeout_s`` and ``max_attempts``. Raises InvalidJob naming each bad field,
    Job.DoesNotExist, or SchedulerError when the job is cancelled or its one-off run
    already started, guards.ManagedJob (a SchedulerError) when it is a workflow's node
    (docs/workflows.md, "Node jobs").
    """
    refuse_managed([job_id], "changed", using)
    broker = get_broker(using)
    with transaction.atomic(using=using):
        job = (Job.objects.using(using).select_related("schedule")
               .select_for_update(of=("self",)).get(pk=job_id))
        if job.status == Job.Status.CANCELLED:
            raise SchedulerError(f"job {job_id} is cancelled; it can no longer be changed")
        clean = check_update(job, changes, using)
        now = db_now(using)
        fields = [f for f in ("name", "payload", "priority", "timeout_s", "max_attempts")
                  if f in changes] + flow_keys.changed(job, clean)
        for field in fields:
            setattr(job, field, clean[field])
        if job.schedule is not None:
            fields += _reschedule_recurring(job, clean, now, using)
        elif "run_at" in changes and clean["run_at"] != job.run_at:
            _reschedule_one_off(job, clean["run_at"], now, broker, using)
            fields.append("run_at")
        job.save(using=using, update_fields=[*fields, "updated_at"])
    return job


def check_update(job: Job, changes: dict, using: str = "default") -> dict:
    """The rules ``update_job`` applies to ``changes`` (a dict as it takes) of ``job``
    (with its schedule), without writing anything: only UPDATABLE fields, the merged job
    valid as a new job, the owner's bounds. Returns the merged job's cleaned spec; raises
    InvalidJob naming each bad field. The admin's change form checks with it. The payload
    of a job of an internal handler (``django_task``) is code's alone: clients may not
    create such jobs, so they may not rewrite one either (docs/security.md, "Tenants and
    limits")."""
    unknown = set(changes) - UPDATABLE
    if unknown:
        # A job field that cannot change, or no field at all: named with the one meant.
        raise InvalidJob({field: "cannot be changed" if field in NAMES
                          else unknown_message(field, UPDATABLE)
                          for field in sorted(unknown, key=str)})
    if "payload" in changes and job.handler not in creatable_handler_names():
        raise InvalidJob({"payload": f"cannot be changed on a {job.handler} job: code "
                                     "enqueued it, and its payload names what runs"})
    clean = validate_job(_merged_spec(job, changes), owner_id=job.owner_id,
                         stored_payload=job.payload if job.handler == "http" else None)
    bounds = tenants.bounds_of(job.owner_id, using)
    if bounds is not None and (problems := tenants.field_problems(
            {"handler": job.handler, **changes}, bounds)):
        raise InvalidJob(problems)
    return clean


def _merged_spec(job: Job, changes: dict) -> dict:
    schedule, errors = job.schedule, {}
    if schedule is not None and "run_at" in changes:
        errors["run_at"] = "a recurring job has no run_at; change its schedule instead"
    if schedule is None:
        for field in sorted(SCHEDULE_FIELDS & set(changes)):
            errors[field] = "a one-off job has no schedule; change its run_at instead"
    errors.update(retry_fields.move_problems(job.expires_at, changes.get("run_at")))
    if errors:
        raise InvalidJob(errors)
    spec = {
        "name": job.name, "handler": job.handler, "payload": job.payload, "queue": job.queue,
        "priority": job.priority, "timeout_s": job.timeout_s,
        "max_attempts": job.max_attempts, "run_at": job.run_at, **flow_keys.templates(job),
    }
    if schedule is not None:
        spec.update(cron=schedule.cron, timezone=schedule.timezone,
                    misfire_policy=schedule.misfire_policy, max_lag_s=schedule.max_lag_s,
                    jitter_s=schedule.jitter_s)
    spec.update(changes)
    if job.handler == "http" and "payload" not in changes:
        spec["payload"] = redacted(job.payload)  # checked as if sent back: secrets kept
    return spec


def _reschedule_recurring(job: Job, clean: dict, now: datetime, using: str) -> list[str]:
    schedule = job.schedule
    moved = (clean["cron"], clean["timezone"]) != (schedule.cron, schedule.timezone)
    schedule.cron, schedule.timezone = clean["cron"], clean["timezone"]
    schedule.misfire_policy, schedule.max_lag_s = clean["misfire_policy"], clean["max_lag_s"]
    schedule.jitter_s = clean["jitter_s"]
    schedule.save(using=using, update_fields=["cron", "timezone", "misfire_policy",
                                              "max_lag_s", "jitter_s"])
    if not moved:
        return []
    job.next_run_at = cron.next_after(schedule.cron, schedule.timezone, now)
    # Runs of the old schedule's future occurrences (lookahead) no longer belong to it.
    Run.objects.using(using).filter(
        job=job, state=RunState.SCHEDULED, attempt=0, scheduled_at__gt=now
    ).update(state=RunState.CANCELLED, finished_at=now)
    return ["next_run_at"]


def _reschedule_one_off(job: Job, run_at: datetime, now: datetime, broker, using: str) -> None:
    runs = Run.objects.using(using)
    if runs.filter(job=job, scheduled_at=run_at).exists():
        raise InvalidJob({"run_at": "the job already had a run at that time"})
    cancelled = runs.filter(job=job, scheduled_at=job.run_at, state__in=PENDING_STATES,
                            attempt=0).update(state=RunState.CANCELLED, finished_at=now)
    if not cancelled:
        raise SchedulerError(f"job {job.pk}'s run already started; create a new job instead")
    run = runs.create(job=job, scheduled_at=run_at, run_at=run_at, queue=job.queue,
                      shard=shard_of(job.shard_source, conf.get("SHARDS")),
                      priority=job.priority,
                      max_attempts=job.max_attempts)
    job.run_at = run_at
    broker.push_after_commit(
        [RunRef(run.pk, run.queue, run.shard, run.priority, run_at, job.owner_id)])
