"""Pause and resume (docs/cron.md, "Pause and resume").

A pause holds back every run of the job that has not started: the scheduler creates none
(it claims active jobs only) and no broker leases one (the lease statement re-checks the
job's status). The job records when it was paused (``paused_at``, database clock).

Resume decides, once and for all, what becomes of the runs whose ``scheduled_at`` fell
inside the paused interval ``[paused_at, resume]``: those already materialised and held,
and the cron occurrences the scheduler did not materialise because the job was paused.
``catch_up`` says which of them run:

* ``skip`` (the default): none. Held runs end ``cancelled`` with the reason in ``error``.
* ``latest``: the latest one, if it is within the schedule's ``max_lag_s``.
* ``all``: every one within ``max_lag_s``, oldest first.

The catch-up runs resume creates count against the owner's pending-runs quota
(``max_pending``, docs/isolation.md, "Tenant bounds"), as a trigger does: a resume whose
catch-up would take an owner over it is refused with jobs.tenants.QuotaExceeded and
changes nothing (every job of the call stays paused); resume with ``latest`` or ``skip``
instead, or raise the quota. Held runs were already pending, so keeping them adds
nothing, and the occurrences missed before the pause are the scheduler's, as unbounded
as its cron runs.

Scheduler downtime is not a pause: cron occurrences missed before the pause (the
scheduler was behind) follow the schedule's misfire policy, and occurrences after the
resume follow it too, as they always did (jobs/schedules/scheduler.py). Runs scheduled before the
pause that had not started (queued behind others, waiting for a retry) are not in the
interval: they run on resume. Runs materialised ahead for after the resume stay.
"""

from datetime import datetime, timedelta

from django.db import transaction

from jobs import tenants
from jobs.models import Job
from jobs.schedules import cron, zones
from jobs.schedules.scheduler import plan_occurrences
from runs import tracing
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.clock import db_now, seconds
from runs.execution.transitions import run_refs
from runs.models import PENDING_STATES, Run, RunState
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob

CATCH_UP = ("skip", "latest", "all")
ONE_US = timedelta(microseconds=1)
DOWNTIME_LIMIT = 10_000  # most occurrences missed before a pause that resume plans


def pause(job_ids, using: str = "default") -> int:
    """Pause the active jobs among ``job_ids`` (ints): no run of theirs starts until
    resume; ``paused_at`` is set to the database's now. Returns how many were paused."""
    with transaction.atomic(using=using):
        jobs = Job.objects.using(using).filter(pk__in=list(job_ids), status=Job.Status.ACTIVE)
        ids = list(jobs.select_for_update().values_list("pk", flat=True))
        now = db_now(using)
        Job.objects.using(using).filter(pk__in=ids).update(
            status=Job.Status.PAUSED, paused_at=now, updated_at=now)
    return len(ids)


def resume(job_ids, catch_up: str = "skip", using: str = "default") -> int:
    """Resume the paused jobs among ``job_ids`` (ints). ``catch_up`` (one of CATCH_UP)
    says which runs scheduled inside the paused interval run (module docstring); the
    others that were held end ``cancelled``, with why in ``error``. Held runs scheduled
    outside the interval go back to the broker. Raises InvalidJob for an unknown
    ``catch_up``, before anything changes, and for a stored schedule that no longer
    reads (``cron`` or ``timezone``, jobs/schedules/zones.py: nothing changed), and
    jobs.tenants.QuotaExceeded (nothing changed) if the catch-up runs would take an owner
    over ``max_pending``. Returns how many jobs were resumed."""
    if catch_up not in CATCH_UP:
        raise InvalidJob({"catch_up": f"must be one of {', '.join(CATCH_UP)}, "
                                      f"not {catch_up!r}"})
    broker = get_broker(using)
    with transaction.atomic(using=using):
        jobs = list(Job.objects.using(using).filter(pk__in=list(job_ids),
                                                    status=Job.Status.PAUSED)
                    .select_related("schedule").select_for_update(of=("self",))
                    .order_by("pk"))
        now = db_now(using)
        for job in jobs:
            if job.schedule is not None and (problems := zones.stored_problems(
                    job.schedule.cron, job.schedule.timezone)):
                raise InvalidJob(problems)  # rolls back the jobs settled before it
            _settle(job, now, catch_up, using)
        ids = [job.pk for job in jobs]
        pending = Run.objects.using(using).filter(job_id__in=ids, state__in=PENDING_STATES)
        broker.push_after_commit(run_refs(pending))
    return len(jobs)


def _settle(job: Job, now: datetime, catch_up: str, using: str) -> None:
    """Apply ``catch_up`` to ``job``'s paused interval and make it active again."""
    # A job paused before paused_at existed: its last update is when it was paused.
    start = job.paused_at or job.updated_at
    runs = Run.objects.using(using).filter(job=job)
    held = dict(runs.filter(state__in=PENDING_STATES, scheduled_at__gte=start,
                            scheduled_at__lte=now).values_list("scheduled_at", "pk"))
    new_times: list[datetime] = []
    next_run_at = job.next_run_at
    oldest = None
    if job.schedule is not None:
        oldest = now - seconds(job.schedule.max_lag_s)
        missed, interval, next_run_at = _cron_times(job, start, now)
        new_times += missed
        candidates = sorted(set(interval) | set(held))
    else:
        candidates = sorted(held)
    if oldest is not None:
        candidates = [t for t in candidates if t >= oldest]
    chosen = {"skip": [], "latest": candidates[-1:], "all": candidates}[catch_up]
    caught_up = [t for t in chosen if t not in held]
    bounds = tenants.bounds_of(job.owner_id, using)
    if bounds is not None and caught_up:
        tenants.check_quotas(bounds, 0, len(caught_up), using)
    new_times += caught_up
    dropped = [pk for t, pk in held.items() if t not in chosen]
    if dropped:
        runs.filter(pk__in=dropped, state__in=PENDING_STATES).update(
            state=RunState.CANCELLED, finished_at=now,
            error=(f"skipped: scheduled while its job was paused ({_iso(start)} to "
                   f"{_iso(now)}); resumed with catch_up={catch_up}"))
    if new_times:
        _create_runs(job, new_times, using)
    # Held runs that now run late on purpose are catch-up runs too.
    runs.filter(pk__in=[pk for t, pk in held.items() if t in chosen]).update(catch_up=True)
    Job.objects.using(using).filter(pk=job.pk).update(
        status=Job.Status.ACTIVE, paused_at=None, next_run_at=next_run_at, updated_at=now)


def _cron_times(job: Job, start: datetime, now: datetime):
    """For a cron job resumed at ``now`` after a pause from ``start``: the occurrences
    missed before the pause that its misfire policy keeps, the occurrences inside the
    paused interval not yet materialised, and the next occurrence after ``now``."""
    schedule = job.schedule
    missed: list[datetime] = []
    next_at = job.next_run_at
    if next_at is None:
        return missed, [], None
    if next_at < start:
        # The scheduler was behind when the job was paused: downtime, not the pause.
        missed, next_at = plan_occurrences(job, now, start - ONE_US, limit=DOWNTIME_LIMIT,
                                           grace_s=conf.get("MISFIRE_GRACE_S"))
        if next_at is None:
            return missed, [], None
    interval: list[datetime] = []
    for moment in cron.iter_after(schedule.cron, schedule.timezone,
                                  max(next_at, start) - seconds(1)):
        if moment > now:
            return missed, interval, moment
        if moment >= start and moment >= next_at:
            interval.append(moment)
    return missed, interval, None


def _create_runs(job: Job, times: list[datetime], using: str) -> None:
    """Catch-up runs of ``job`` at ``times`` (scheduled_at), as the scheduler makes them:
    run_at is scheduled_at plus the job's jitter. An existing run at one of the times is
    kept. Each starts a trace of its own, as a cron occurrence does (docs/tracing.md)."""
    jitter = cron.jitter_offset(job.pk, job.schedule.jitter_s) if job.schedule else 0.0
    shard = shard_of(job.shard_source, conf.get("SHARDS"))
    Run.objects.using(using).bulk_create(
        [Run(job=job, scheduled_at=t, run_at=t + seconds(jitter), queue=job.queue,
             shard=shard, priority=job.priority, max_attempts=job.max_attempts,
             jitter_s=jitter, catch_up=True,
             trace_context=tracing.enqueued(job.handler, job.pk, own=True))
         for t in times],
        ignore_conflicts=True)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")
