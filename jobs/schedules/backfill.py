"""Backfill: runs made on purpose for the past occurrences of a cron job in a range
(docs/cron.md, "Backfill"). The command, the REST endpoint and the admin action all call
``backfill_job`` (a cron workflow's twin is workflows/backfill.py, built on the helpers
here).

The rules:

* The range is ``[start, end)``: start inclusive, end exclusive, ISO 8601 date-times (or
  dates: midnight); one without a UTC offset is read in the schedule's timezone.
  Occurrences are the schedule's own (jobs.schedules.cron, in its timezone), of those only the ones
  at or before the database's now: later ones are the scheduler's to make.
* Bounded: at most BACKFILL_MAX_OCCURRENCES occurrences; a range holding more is refused
  whole, naming the limit. The owner's quotas count the runs it makes (max_pending), as
  for a trigger (docs/isolation.md, "Tenant bounds").
* Idempotent: a run is (job, scheduled_at), UNIQUE, inserted ``ON CONFLICT DO NOTHING``
  as the scheduler inserts its occurrences (jobs/schedules/scheduler.py), so an occurrence that has
  a run already (the scheduler's, an earlier backfill's) is skipped and counted as such.
* Each run is a normal run (retries, dead letter, history) whose ``backfill_id`` names
  the Backfill row that made it; jitter applies as to the scheduler's runs.
* Made CHUNK occurrences per transaction, the counts and ``progress_at`` on the Backfill
  row committed with each, so the admin shows the progress of a backfill being made; the
  row itself is made in the first chunk's transaction, and one whose process died shows
  "stopped" (jobs/models/backfill.py, BackfillBase.state).
"""

from collections.abc import Callable
from datetime import datetime, time
from zoneinfo import ZoneInfo

from django.db import connections, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import dateparse, timezone

from jobs import tenants
from jobs.guards import refuse_managed
from jobs.models import Backfill, Job, Schedule
from jobs.schedules import cron
from jobs.validation import moment_problem
from runs import tracing
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.clock import db_now, seconds
from runs.execution.transitions import run_refs
from runs.models import TERMINAL_STATES, Run
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob, SchedulerError

CHUNK = 100  # occurrences made per transaction
ISO_HINT = "an ISO 8601 date-time, e.g. 2026-01-01T00:00:00Z, or a date, e.g. 2026-01-01"
COLUMNS = ("job_id, scheduled_at, run_at, state, queue, shard, priority, attempt, "
           "max_attempts, worker_id, created_at, error, jitter_s, catch_up, backfill_id, "
           "trace_context")


def parse_moment(value, tz: str, field: str) -> datetime:
    """``value`` (an aware or naive datetime, a date, or ISO 8601 text) as an aware
    datetime; naive values and dates are read in timezone ``tz`` (IANA name), a date as
    its midnight. Raises InvalidJob ``{field: why}`` for a missing or unreadable value or
    one outside the years 1970-9998 (jobs/validation.py, moment_problem)."""
    if value in (None, ""):
        raise InvalidJob({field: f"this field is required: {ISO_HINT}"})
    moment = value
    if isinstance(value, str):
        try:
            moment = dateparse.parse_datetime(value.strip())
            if moment is None and (day := dateparse.parse_date(value.strip())) is not None:
                moment = datetime.combine(day, time())
        except ValueError:
            moment = None
        if moment is None:
            raise InvalidJob({field: f"must be {ISO_HINT}; got {value[:40]!r}"})
    elif not isinstance(value, datetime):
        raise InvalidJob({field: f"must be {ISO_HINT}"})
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=ZoneInfo(tz))
    if problem := moment_problem(moment):
        raise InvalidJob({field: problem})
    return moment


def plan(schedule: Schedule, start, end, now: datetime) -> tuple[datetime, datetime,
                                                                 list[datetime]]:
    """The occurrences of ``schedule`` a backfill of ``[start, end)`` makes: at or after
    ``start``, before ``end`` and at or before ``now`` (aware), in order, aware UTC.
    Returns ``(start, end, occurrences)`` with start and end read by ``parse_moment``.
    Raises InvalidJob naming ``start`` or ``end`` for a bad value, an empty or future
    range, or one holding more than BACKFILL_MAX_OCCURRENCES occurrences; SchedulerError
    for a stored schedule that no longer reads."""
    start = parse_moment(start, schedule.timezone, "start")
    end = parse_moment(end, schedule.timezone, "end")
    if end <= start:
        raise InvalidJob({"end": f"must be after start ({start.isoformat()}): the range is "
                                 f"start inclusive to end exclusive"})
    if start > now:
        raise InvalidJob({"start": f"must not be in the future (now is {now.isoformat()}): "
                                   f"a backfill makes past occurrences; the scheduler makes "
                                   f"the later ones"})
    limit = conf.get("BACKFILL_MAX_OCCURRENCES")
    try:
        found = cron.occurrences(schedule.cron, schedule.timezone, start,
                                 min(end - seconds(1e-6), now), limit=limit + 1)
    except ValueError as exc:
        raise SchedulerError(f"its stored schedule does not read: {exc}") from exc
    if len(found) > limit:
        raise InvalidJob({"end": (
            f"the range holds more than {limit} occurrences, the most one backfill may "
            f"make (BACKFILL_MAX_OCCURRENCES); the one after the last allowed is at "
            f"{found[-1].isoformat()}: split the range there")})
    return start, end, found


def make_in_chunks(create: Callable[[], object], times: list[datetime],
                   make: Callable[[int, list[datetime]], int], using: str,
                   on_progress: Callable[[int], None] | None = None,
                   on_planned: Callable[[object], None] | None = None):
    """Make ``times`` CHUNK at a time with ``make(record id, chunk) -> runs made``, each
    chunk in one transaction with its counts and ``progress_at`` on the record (a
    Backfill or WorkflowBackfill) that ``create()`` makes inside the first chunk's: a
    process killed before a chunk committed leaves no row that looks in progress for
    ever, and one killed later a row whose ``state`` turns "stopped". Calls
    ``on_planned(record)`` once the first chunk committed and ``on_progress(occurrences
    done)`` after each. An error after the first chunk is written to ``record.error``
    and raised; ``done_at`` is set when all were made. Returns ``record``, refreshed."""
    stored = None
    try:
        for begin in range(0, max(len(times), 1), CHUNK):
            chunk = times[begin:begin + CHUNK]
            with transaction.atomic(using=using):
                record = stored or create()
                made = make(record.pk, chunk) if chunk else 0
                type(record).objects.using(using).filter(pk=record.pk).update(
                    made=F("made") + made, skipped=F("skipped") + len(chunk) - made,
                    progress_at=Now())
            if stored is None and on_planned is not None:
                on_planned(record)
            stored = record
            if on_progress is not None and chunk:
                on_progress(len(chunk))
    except Exception as exc:
        if stored is not None:
            type(stored).objects.using(using).filter(pk=stored.pk).update(
                error=str(exc)[:2000])
        raise
    type(stored).objects.using(using).filter(pk=stored.pk).update(done_at=db_now(using))
    stored.refresh_from_db()
    return stored


def backfill_job(job_id: int, start, end, *, using: str = "default", requested_by=None,
                 on_progress: Callable[[int], None] | None = None,
                 on_planned: Callable[[Backfill], None] | None = None) -> Backfill:
    """Make a run of cron job ``job_id`` for each occurrence in ``[start, end)`` that has
    none (rules: the module's docstring; docs/cron.md, "Backfill"). ``start``/``end``:
    ISO 8601 text, dates or datetimes (naive: the job's timezone). ``requested_by``: the
    user asking (None from the command). ``on_planned(backfill)`` is called once the
    Backfill row exists (its ``total`` known; made with the first chunk),
    ``on_progress(n)`` as each chunk commits.

    Returns the Backfill (``total``, ``made``, ``skipped``). Raises Job.DoesNotExist;
    InvalidJob naming ``start`` or ``end`` (see ``plan``); SchedulerError when the job is
    a one-off, not active, or a workflow's node (guards.ManagedJob);
    tenants.QuotaExceeded when the new runs would take the owner over ``max_pending``
    (before anything is made). Runs made before a later error stay (idempotent: run the
    same backfill again to finish it)."""
    refuse_managed([job_id], "backfilled", using)
    job = Job.objects.using(using).select_related("schedule").get(pk=job_id)
    if job.schedule is None:
        raise SchedulerError(f"job {job_id} is a one-off job; only a cron job has past "
                             f"occurrences to backfill")
    start, end, times = plan(job.schedule, start, end, db_now(using))
    if job.status != Job.Status.ACTIVE:
        raise SchedulerError(f"job {job_id} is {job.status}; only active jobs can be "
                             f"backfilled")

    def create() -> Backfill:
        # The job row before the owner's quota lock, in the order _make_runs and
        # services.trigger take them: the other order deadlocked concurrent backfills.
        list(Job.objects.using(using).select_for_update(of=("self",)).filter(pk=job_id)
             .values_list("pk", flat=True))
        new = len(times) - Run.objects.using(using).filter(
            job_id=job_id, scheduled_at__in=times).count() if times else 0
        bounds = tenants.bounds_of(job.owner_id, using)
        if bounds is not None:
            tenants.check_quotas(bounds, 0, new, using)
        return Backfill.objects.using(using).create(
            job=job, start=start, end=end, total=len(times), requested_by=requested_by)

    # One enqueue span for all the backfill's runs, a child of the span current here (a
    # request's), which every run stores (docs/tracing.md, "Runs made elsewhere").
    with tracing.enqueue(job.handler):
        trace = tracing.current()
        return make_in_chunks(create, times, lambda pk, chunk: _make_runs(
            job_id, pk, chunk, using, trace), using, on_progress, on_planned)


def _make_runs(job_id: int, backfill_id: int, times: list[datetime], using: str,
               trace: str | None = None) -> int:
    """One chunk: with the job's row locked (as a trigger and the scheduler lock it),
    insert its runs at ``times`` unless they exist, storing the trace context ``trace``
    (a W3C traceparent, or None); push the new ones after commit.
    Returns how many were made."""
    broker = get_broker(using)
    with transaction.atomic(using=using):
        job = (Job.objects.using(using).select_related("schedule").select_for_update(
            of=("self",)).get(pk=job_id))
        if job.status != Job.Status.ACTIVE:
            raise SchedulerError(f"job {job_id} became {job.status}; the backfill stopped")
        bounds = tenants.bounds_of(job.owner_id, using)
        if bounds is not None:
            new = len(times) - Run.objects.using(using).filter(
                job_id=job_id, scheduled_at__in=times).count()
            tenants.check_quotas(bounds, 0, new, using)
        jitter = cron.jitter_offset(job.pk, job.schedule.jitter_s)
        shard = shard_of(job.shard_source, conf.get("SHARDS"))
        connection = connections[using]
        adapt = connection.ops.adapt_datetimefield_value
        now = adapt(db_now(using))
        params = []
        for when in times:
            params += [job.pk, adapt(when), adapt(when + seconds(jitter)), "scheduled",
                       job.queue, shard, job.priority, 0, job.max_attempts, "", now, "",
                       jitter, False, backfill_id, trace]
        values = ",".join(["(" + ",".join(["%s"] * 16) + ")"] * len(times))
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {Run._meta.db_table} ({COLUMNS}) VALUES {values} "
                           f"ON CONFLICT (job_id, scheduled_at) DO NOTHING RETURNING id",
                           params)
            made = len(cursor.fetchall())
        if made:
            broker.push_after_commit(run_refs(Run.objects.using(using).filter(
                job_id=job_id, scheduled_at__in=times, backfill_id=backfill_id)))
    return made


def finished_count(backfill: Backfill) -> int:
    """How many of the runs ``backfill`` made have finished (succeeded, dead, cancelled
    or expired); read through the runs' (job, scheduled_at) index."""
    return Run.objects.using(backfill._state.db).filter(
        job_id=backfill.job_id, scheduled_at__gte=backfill.start,
        scheduled_at__lt=backfill.end, backfill_id=backfill.pk,
        state__in=TERMINAL_STATES).count()
