"""The jobs app's core tables: a job, its schedule and the queue names a job may use
(docs/architecture.md, "Data model").

A job is a handler name plus a JSON payload, and either a one-off ``run_at`` or a
recurring ``schedule``; the CheckConstraint ``job_run_at_xor_schedule`` makes "exactly one
of the two" a database rule rather than a ``save()`` convention.
"""

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

# \A...\Z, not ^...$: "$" also matches before a trailing newline ("default\n").
QUEUE_RE = re.compile(r"\A[A-Za-z0-9_.-]{1,64}\Z")


def validate_queue_list(value: str) -> None:
    """A comma-separated list of queue names (OwnerPolicy.queues); raises ValidationError
    naming the first bad name."""
    for name in (part.strip() for part in value.split(",")):
        if name and not QUEUE_RE.match(name):
            raise ValidationError(
                f"{name!r} is not a queue name (1-64 letters, digits, '_', '.', '-')")


class MisfirePolicy(models.TextChoices):
    """What a schedule does with occurrences missed while the scheduler was down
    (docs/cron.md; a pause is decided by resume's catch_up instead)."""

    RUN_ALL = "run_all", "run every missed occurrence (within max lag)"
    RUN_ONCE = "run_once", "run one catch-up run now"
    SKIP = "skip", "skip to the next future occurrence"


class Schedule(models.Model):
    """The recurring part of a job: a five-field cron expression (cron(5)) in an IANA
    timezone, with its misfire policy and catch-up window ``max_lag_s`` (seconds)."""

    cron = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    misfire_policy = models.CharField(
        max_length=16, choices=MisfirePolicy.choices, default=MisfirePolicy.RUN_ONCE
    )
    max_lag_s = models.PositiveIntegerField(default=3600)
    jitter_s = models.PositiveIntegerField(
        default=0, help_text="spread runs over this many seconds after each occurrence"
    )

    class Meta:
        app_label = "jobs"

    def __str__(self) -> str:
        return f"{self.cron} ({self.timezone})"


class JobQuerySet(models.QuerySet):
    def active(self):
        return self.filter(status=Job.Status.ACTIVE)

    def recurring(self):
        return self.filter(schedule__isnull=False)


class Job(models.Model):
    """What to run and when. ``priority`` 0 is most urgent, 9 least; ``timeout_s`` is the
    wall-clock limit of one attempt in seconds; ``max_attempts`` counts the first try.

    ``next_run_at`` (UTC) is the next cron occurrence not yet materialised as a run; the
    scheduler advances it atomically (``WHERE next_run_at = old``)."""

    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        CANCELLED = "cancelled"

    name = models.CharField(max_length=200)
    # No index of its own: job_owner_status (owner, status) serves lookups by owner.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
        related_name="jobs", db_index=False,
    )
    handler = models.CharField(max_length=200)
    payload = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=64, default="default")
    shard_key = models.CharField(
        max_length=200, blank=True, default="",
        help_text="runs go to shard crc32(shard_key or handler) % SHARDS of their queue")
    priority = models.PositiveSmallIntegerField(default=5)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    run_at = models.DateTimeField(null=True, blank=True)
    schedule = models.OneToOneField(
        Schedule, null=True, blank=True, on_delete=models.PROTECT, related_name="job"
    )
    next_run_at = models.DateTimeField(null=True, blank=True)
    timeout_s = models.PositiveIntegerField(default=300)
    max_attempts = models.PositiveSmallIntegerField(default=4)
    # The retry strategy (runs/execution/retry.py): null, today's backoff; else the keys given
    # (strategy, base_s, cap_s, jitter_s, retry_on, never_retry_on), the rest default.
    retry = models.JSONField(null=True, blank=True)
    # Expiry (docs/retries-and-expiry.md): a run not started by expires_at (one-off jobs),
    # or expires_in_s seconds after its scheduled_at, ends "expired" at lease time.
    expires_at = models.DateTimeField(null=True, blank=True)
    expires_in_s = models.PositiveIntegerField(null=True, blank=True)
    # When the job was last paused (database clock); resume decides what happens to the
    # runs whose scheduled_at falls between this and the resume (jobs/schedules/pausing.py).
    paused_at = models.DateTimeField(null=True, blank=True)
    # Unique jobs (jobs/ingest/unique.py, docs/api.md "Unique jobs"): the key as given; the lock
    # ("<owner id or ->:<key>") while the job holds it, unique in the table, so the
    # database refuses a second holder; the run states that count; the period's end.
    unique_key = models.CharField(max_length=200, blank=True, default="")
    # Unique where set (the constraint job_unique_lock below): a plain unique=True also
    # indexed the NULL of every job without a key, and added a LIKE index nothing uses:
    # two index entries per bulk-created job for nothing.
    unique_lock = models.CharField(  # noqa: DJ001 - NULL is "no lock", unlike ""
        max_length=255, null=True, blank=True, editable=False)
    unique_states = models.CharField(max_length=100, blank=True, default="", editable=False)
    unique_until = models.DateTimeField(null=True, blank=True, editable=False)
    # Flow control (docs/isolation.md, "Rate limits" and "Concurrency keys"): each key
    # stored "<template>=<value>", its value evaluated from the job at creation
    # (jobs/flow_keys.py); "" none. concurrency_limit: most runs of one key value at once.
    rate_key = models.CharField(max_length=255, blank=True, default="", db_default="")
    concurrency_key = models.CharField(max_length=255, blank=True, default="", db_default="")
    concurrency_limit = models.PositiveIntegerField(default=1, db_default=1)
    # Callbacks (docs/callbacks.md; jobs/callbacks.py): the handler, as {"handler",
    # "payload"}, run once per run of this job that succeeds (on_success) or ends dead or
    # expired (on_failure); null, none. A callback's own job has callback_of, the run
    # that made it (no foreign key: the runs table is partitioned), and callback_on, which
    # field ("on_success" or "on_failure"); UNIQUE over the two makes it once.
    on_success = models.JSONField(null=True, blank=True)
    on_failure = models.JSONField(null=True, blank=True)
    callback_of = models.BigIntegerField(null=True, blank=True, editable=False)
    callback_on = models.CharField(max_length=16, blank=True, default="", db_default="",
                                   editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        app_label = "jobs"
        constraints = [
            models.CheckConstraint(
                condition=Q(run_at__isnull=False, schedule__isnull=True)
                | Q(run_at__isnull=True, schedule__isnull=False),
                name="job_run_at_xor_schedule",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=0, priority__lte=9), name="job_priority_0_9"
            ),
            models.CheckConstraint(condition=Q(timeout_s__gte=1), name="job_timeout_positive"),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="job_max_attempts_positive"
            ),
            models.UniqueConstraint(fields=["unique_lock"], name="job_unique_lock",
                                    condition=Q(unique_lock__isnull=False)),
            models.UniqueConstraint(fields=["callback_of", "callback_on"],
                                    name="job_callback_once",
                                    condition=Q(callback_of__isnull=False)),
        ]
        indexes = [
            models.Index(
                fields=["next_run_at"],
                name="job_due_active",
                condition=Q(status="active", next_run_at__isnull=False),
            ),
            models.Index(fields=["owner", "status"], name="job_owner_status"),
            # runs/flow/control.py's in_use asks every second whether any job is keyed: without
            # this (small, usually empty) index that read every job of a large table.
            models.Index(fields=["id"], name="job_flow_keyed",
                         condition=~Q(rate_key="") | ~Q(concurrency_key="")),
            # Every batched ack asks whether its runs' jobs have an on_success callback
            # (jobs/callbacks.py, watched_sql): without this (small, usually empty) index
            # PostgreSQL answered by reading every job (docs/performance.md, "The ack").
            models.Index(fields=["id"], name="job_on_success",
                         condition=Q(on_success__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.handler})"

    @property
    def is_recurring(self) -> bool:
        return self.schedule_id is not None

    @property
    def shard_source(self) -> str:
        """What the shard is hashed from: ``shard_key`` if set, else the handler name."""
        return self.shard_key or self.handler
