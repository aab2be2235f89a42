"""Runs, attempts and their log lines (docs/architecture.md, "Run states and transitions").

A run is one occurrence of a job at ``scheduled_at``; at most one exists per
(job, scheduled_at). Every state change is one fenced UPDATE in runs/execution/transitions.py,
never ``save()`` on a loaded row.
"""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Greatest


class RunState(models.TextChoices):
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    # Not started by its job's expiry (expires_at / expires_in_s): ended at lease time,
    # never run; not dead (nothing failed), so not in the dead letter (docs/retries-and-expiry.md).
    EXPIRED = "expired"


PENDING_STATES = (RunState.SCHEDULED, RunState.QUEUED, RunState.RETRYING)
DELAYED_STATES = (RunState.SCHEDULED, RunState.RETRYING)
TERMINAL_STATES = (RunState.SUCCEEDED, RunState.DEAD, RunState.CANCELLED, RunState.EXPIRED)


class RunQuerySet(models.QuerySet):
    def pending(self):
        return self.filter(state__in=PENDING_STATES)

    def running(self):
        return self.filter(state=RunState.RUNNING)

    def dead(self):
        return self.filter(state=RunState.DEAD)

    def finished(self):
        return self.filter(state__in=TERMINAL_STATES)


class Run(models.Model):
    """One occurrence of a job.

    ``run_at`` (UTC) is when the run may next start: ``scheduled_at`` plus its
    ``jitter_s`` (seconds) at first, then now + backoff after a failed attempt.
    ``attempt`` counts attempts started and is the fencing token of the current lease.
    ``queue``, ``shard`` and ``priority`` are copied from the job so the broker never needs
    a join.
    """

    # No index of its own: run_job_scheduled_at (job, scheduled_at) serves lookups by job,
    # and every index costs each state change of a run an entry (BENCHMARKS.md).
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="runs",
                            db_index=False)
    scheduled_at = models.DateTimeField()
    run_at = models.DateTimeField()
    jitter_s = models.FloatField(default=0.0)
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.SCHEDULED)
    queue = models.CharField(max_length=64, default="default")
    shard = models.PositiveSmallIntegerField(default=0)
    priority = models.PositiveSmallIntegerField(default=5)
    attempt = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField(default=4)
    worker_id = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    # A catch-up run: made late on purpose for an occurrence missed while the scheduler
    # was down (misfire policy) or held by a pause (resume's catch_up). Its lateness is
    # not the system's lag, so lag figures leave it out (docs/cron.md, "Catch-up runs").
    catch_up = models.BooleanField(default=False, db_default=False)
    # The backfill that made this run (jobs.Backfill's id; None: the scheduler, a trigger
    # or the API made it). No foreign key: the runs table is partitioned and keeps none
    # (docs/architecture.md, "Data model"); docs/cron.md, "Backfill".
    backfill_id = models.BigIntegerField(null=True, blank=True)
    # The W3C traceparent of the span that made the run (None: tracing off, or nothing
    # traced made it): the parent of its lease, attempt and ack spans, whichever worker
    # and attempt (runs/tracing.py; docs/tracing.md). NULL rather than "": the COPY and
    # INSERT paths that know of no context leave the column out.
    trace_context = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001

    objects = RunQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "scheduled_at"], name="run_job_scheduled_at"),
            models.CheckConstraint(
                condition=Q(priority__gte=0, priority__lte=9), name="run_priority_0_9"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="run_max_attempts_positive"
            ),
            models.CheckConstraint(
                condition=~Q(state="running") | Q(lease_expires_at__isnull=False),
                name="run_running_has_lease",
            ),
        ]
        indexes = [
            models.Index(
                fields=["run_at"], name="run_delayed",
                condition=Q(state__in=["scheduled", "retrying"]),
            ),
            models.Index(
                fields=["queue", "priority", "run_at", "id"], name="run_ready",
                condition=Q(state="queued"),
            ),
            models.Index(
                fields=["lease_expires_at"], name="run_leased", condition=Q(state="running"),
            ),
            models.Index(fields=["state", "finished_at"], name="run_state_finished"),
            # The run lists' default order, newest scheduled first (read backwards), and
            # their scheduled_after/before ranges: without it /api/runs/ sorts every run
            # (docs/api.md, "Lists at scale"). On partitioned tables every partition has
            # its own, created with it (runs/history/time_partitions.py).
            models.Index(fields=["scheduled_at", "id"], name="run_scheduled"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of job {self.job_id} at {self.scheduled_at:%Y-%m-%d %H:%M:%S}"


# A run's lag counts from the later of its scheduled time and its creation: a one-off
# backdated to 1970 runs at once, 0 s late, not 56 years (docs/api.md, "Job fields").
# A scheduler that materialises a cron run after its time (within grace, not a catch-up)
# hides that lateness here; LOOKAHEAD_S makes it create runs ahead, so it rarely does.
LAG_FROM = Greatest("scheduled_at", "created_at")


def lag_origin(run: Run):
    """The moment ``run``'s lag counts from (aware datetime): the later of its
    ``scheduled_at`` and its ``created_at``. ``LAG_FROM`` is the same in SQL."""
    return max(run.scheduled_at, run.created_at)


class AttemptOutcome(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CRASHED = "crashed"
    LEASE_EXPIRED = "lease_expired"
    RELEASED = "released"
    CANCELLED = "cancelled"


def _fill_run_scheduled_at(rows: list, parent, key: str, using: str | None) -> None:
    """Set ``run_scheduled_at`` of each row lacking it from its parent row (``parent``
    the model whose primary key ``key`` names, a Run or an Attempt): one query for all.
    The production paths set it themselves; this serves the ORM's create and
    bulk_create (tests, admin tools)."""
    missing = [row for row in rows if row.run_scheduled_at is None]
    if not missing:
        return
    ids = {getattr(row, key) for row in missing}
    found = dict(parent._default_manager.using(using).filter(pk__in=ids)
                 .values_list("pk", "run_scheduled_at" if parent is Attempt
                              else "scheduled_at"))
    for row in missing:
        row.run_scheduled_at = found.get(getattr(row, key))


class _CopiesRunScheduledAt(models.QuerySet):
    """create() and bulk_create() fill the partition key copied from the run
    (docs/retention.md, "Partitioned history")."""

    parent_key = "run_id"

    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        parent = Run if self.parent_key == "run_id" else Attempt
        _fill_run_scheduled_at(objs, parent, self.parent_key, self.db)
        return super().bulk_create(objs, *args, **kwargs)


class AttemptQuerySet(_CopiesRunScheduledAt):
    parent_key = "run_id"


class LogLineQuerySet(_CopiesRunScheduledAt):
    parent_key = "attempt_id"


class Attempt(models.Model):
    """One try of a run by one worker under one lease; ``number`` equals the run's
    ``attempt`` while the lease is held.

    ``run_scheduled_at`` is the run's ``scheduled_at``, copied (a run's is never
    changed): on PostgreSQL it is the partition key, so a run, its attempts and their log
    lines lie in partitions of the same bounds and go together (docs/retention.md,
    "Partitioned history"). No foreign key in the database for the same reason (a
    partitioned runs table can only be referenced by its whole primary key); the
    transitions keep the link: an attempt is inserted by the statement that leases its
    run, and is deleted with it."""

    # No index of its own: attempt_run_number (run, number) serves lookups by run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts",
                            db_index=False, db_constraint=False)
    run_scheduled_at = models.DateTimeField(editable=False)
    number = models.PositiveSmallIntegerField()
    worker_id = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=AttemptOutcome.choices, default=AttemptOutcome.RUNNING
    )
    error = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)

    objects = AttemptQuerySet.as_manager()

    class Meta:
        constraints = [
            # On PostgreSQL (run, number, run_scheduled_at): the same rule, as
            # run_scheduled_at is a function of the run (runs/history/time_partitions.py).
            models.UniqueConstraint(fields=["run", "number"], name="attempt_run_number"),
        ]
        ordering = ["run", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of run {self.run_id}"

    def save(self, *args, **kwargs):
        _fill_run_scheduled_at([self], Run, "run_id", kwargs.get("using") or self._state.db)
        super().save(*args, **kwargs)


class LogLine(models.Model):
    """One log record emitted while an attempt ran (``ctx.logger`` or plain logging).
    ``run_scheduled_at``: the run's, copied, the partition key as on Attempt."""

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="log_lines",
                                db_constraint=False)
    run_scheduled_at = models.DateTimeField(editable=False)
    created_at = models.DateTimeField()
    level = models.PositiveSmallIntegerField()
    logger = models.CharField(max_length=200)
    message = models.TextField()

    objects = LogLineQuerySet.as_manager()

    class Meta:
        ordering = ["attempt", "id"]
        indexes = [models.Index(fields=["attempt", "id"], name="logline_attempt")]

    def __str__(self) -> str:
        return self.message[:80]

    def save(self, *args, **kwargs):
        _fill_run_scheduled_at([self], Attempt, "attempt_id",
                               kwargs.get("using") or self._state.db)
        super().save(*args, **kwargs)


class WorkerProcess(models.Model):
    """A ``runworker`` process, registered at start and refreshed at every heartbeat, so
    operators can see live workers and what they run (``last_heartbeat_at``, database
    clock). ``stopped_at`` is set on a clean exit; a worker killed outright simply stops
    heartbeating."""

    worker_id = models.CharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["last_heartbeat_at"], name="worker_last_heartbeat")]
        verbose_name = "worker"
        verbose_name_plural = "workers"

    def __str__(self) -> str:
        return self.worker_id


class DeadRunManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(state=RunState.DEAD)


class DeadRun(Run):
    """The dead letter as its own admin view: runs whose attempts are exhausted (state
    ``dead``). A proxy of Run, so it has no table of its own."""

    objects = DeadRunManager()

    class Meta:
        proxy = True
        verbose_name = "dead run"
        verbose_name_plural = "dead letter"


class ShardLease(models.Model):
    """A dispatcher's lease on shard ``number`` of every queue: the dispatcher whose lease
    is live promotes, reaps and reconciles that shard (docs/architecture.md, "Daemons")."""

    number = models.PositiveIntegerField(primary_key=True)
    owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"shard {self.number} -> {self.owner or '-'}"


class RateBucket(models.Model):
    """The database broker's token bucket for ``queue``'s rate limit (QUEUE_RATE):
    ``tokens`` left as of ``updated_at``. The Redis broker keeps the same in Redis."""

    queue = models.CharField(max_length=64, primary_key=True)
    tokens = models.FloatField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.queue}: {self.tokens:.1f} tokens"


class ChildRecycleCount(models.Model):
    """Worker child processes replaced by recycling since the table was created, per
    ``reason`` ("runs": MAX_RUNS_PER_CHILD, "memory": MAX_MEMORY_PER_CHILD_MB): the
    Prometheus counter ``scheduler_worker_child_recycles_total`` (runs/worker/recycle.py).
    Workers add what they counted at their heartbeat."""

    reason = models.CharField(max_length=16, primary_key=True)
    count = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.reason}: {self.count}"


class NamedLease(models.Model):
    """A lease on one piece of work that one process at a time may do, named ``name``
    (runs/history/named_leases.py): ``holder`` has it until ``expires_at`` (database clock). A row,
    not an advisory lock, so it holds through PgBouncer's transaction pooling, and a
    holder that dies leaves it to expire."""

    name = models.CharField(max_length=64, primary_key=True)
    holder = models.CharField(max_length=200, blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} -> {self.holder or '-'}"

# Django finds an app's models in its models module.
from runs.alerts.models import (  # noqa: E402, F401, I001
    AlertChannelState,
    AlertEvent,
    AlertPolicy,
    DaemonErrorCount,
    OutcomeCount,
)
