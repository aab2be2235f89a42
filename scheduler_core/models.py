"""The jobs app's tables that runs/ reads too: jobs and schedules, owner policies and the
partition leases, and the stored Idempotency-Key responses the retention prunes
(docs/architecture.md, "Vocabulary" and "Code layout and dependency
rule").

They are defined here, below both apps, because runs never imports jobs; each keeps
``app_label = "jobs"``, so to Django (migrations, admin, table names) they are the jobs
app's models as before, and jobs/models.py gives them their usual import path.

A job is a handler name plus a JSON payload, and either a one-off ``run_at`` or a
recurring ``schedule``; the CheckConstraint ``job_run_at_xor_schedule`` makes "exactly one
of the two" a database rule rather than a ``save()`` convention.
"""

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

# \A...\Z, not ^...$: "$" also matches before a trailing newline ("default\n").
QUEUE_RE = re.compile(r"\A[A-Za-z0-9_.-]{1,64}\Z")


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


class LeaseMember(models.Model):
    """A live member of a lease group (schedulers sharing partitions, dispatchers sharing
    shards): ``expires_at`` is renewed with the member's leases. Members count even while
    they hold nothing, so a newcomer's fair share is given up by the others."""

    group = models.CharField(max_length=64)
    member = models.CharField(max_length=200)
    expires_at = models.DateTimeField()

    class Meta:
        app_label = "jobs"
        constraints = [
            models.UniqueConstraint(fields=["group", "member"], name="lease_member_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.group}: {self.member}"


def validate_queue_list(value: str) -> None:
    """A comma-separated list of queue names (OwnerPolicy.queues); raises ValidationError
    naming the first bad name."""
    for name in (part.strip() for part in value.split(",")):
        if name and not QUEUE_RE.match(name):
            raise ValidationError(
                f"{name!r} is not a queue name (1-64 letters, digits, '_', '.', '-')")


class LeaseTenure(models.Model):
    """One holder's hold on partition or shard ``number`` of lease ``group`` (as
    LeaseMember): from ``started_at`` to ``ended_at`` (null: still held) and how it ended:
    ``released`` (clean stop), ``rebalanced`` (given back for a fair share) or
    ``expired`` (the lease ran out; ``taken_by`` is who took it next, blank if the holder
    took it back itself). A bounded history (runs/daemons/ownership.py, docs/architecture.md)."""

    group = models.CharField(max_length=64)
    number = models.PositiveIntegerField()
    owner = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_how = models.CharField(max_length=16, blank=True, default="")
    taken_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        app_label = "jobs"
        indexes = [models.Index(fields=["group", "number", "ended_at"],
                                name="lease_tenure_open")]

    def __str__(self) -> str:
        return f"{self.group} {self.number}: {self.owner}"


class LeaseChangeCount(models.Model):
    """How many ownership changes of ``event`` lease ``group`` has seen since the table
    was created: the Prometheus counters of /metrics (runs/daemons/ownership.py)."""

    group = models.CharField(max_length=64)
    event = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)

    class Meta:
        app_label = "jobs"
        constraints = [
            models.UniqueConstraint(fields=["group", "event"], name="lease_change_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.group} {self.event}: {self.count}"


class OwnerPolicy(models.Model):
    """Isolation settings and bounds of one owner (a tenant), set by staff through the
    admin or ``/api/limits/`` (docs/isolation.md, "Tenant bounds"). Every bound left null
    takes its settings default: ``max_running`` (OWNER_CONCURRENCY) caps the owner's runs
    running at once across the cluster; ``max_pending`` (OWNER_MAX_PENDING) its runs
    waiting to run; ``max_jobs`` (OWNER_MAX_JOBS) its jobs that are not cancelled;
    ``highest_priority`` (OWNER_HIGHEST_PRIORITY) the most urgent priority its jobs may
    ask for (0 most urgent); ``max_timeout_s`` (OWNER_MAX_TIMEOUT_S, seconds) and
    ``max_attempts`` (OWNER_MAX_ATTEMPTS, first try included) what one job may ask for;
    ``max_map_items`` (OWNER_MAX_MAP_ITEMS) the longest list a mapped workflow node runs
    for (docs/workflows.md, "Mapped nodes").
    ``queues`` (comma-separated) are the queues the owner was given besides the shared
    "default"; ``default_queue`` is where its jobs go when they name none (blank:
    "default"), and counts as given."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE,
        related_name="scheduler_policy",
    )
    max_running = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="runs running at once; empty: SCHEDULER_OWNER_CONCURRENCY")
    max_pending = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="runs waiting to run; empty: SCHEDULER_OWNER_MAX_PENDING")
    max_jobs = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="jobs that are not cancelled; empty: SCHEDULER_OWNER_MAX_JOBS")
    highest_priority = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(9)],
        help_text="most urgent priority allowed (0 most urgent); "
                  "empty: SCHEDULER_OWNER_HIGHEST_PRIORITY")
    max_timeout_s = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="longest timeout_s (seconds); empty: SCHEDULER_OWNER_MAX_TIMEOUT_S")
    max_attempts = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="most attempts, first try included; empty: SCHEDULER_OWNER_MAX_ATTEMPTS")
    max_map_items = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="most items a mapped workflow node runs for; "
                  "empty: SCHEDULER_OWNER_MAX_MAP_ITEMS")
    queues = models.CharField(
        max_length=1000, blank=True, default="", validators=[validate_queue_list],
        help_text='queues this owner may use besides "default", comma-separated')
    default_queue = models.CharField(max_length=64, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "jobs"
        verbose_name_plural = "owner policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(max_running__isnull=True) | Q(max_running__gte=1),
                name="owner_policy_max_running_positive",
            ),
            models.CheckConstraint(
                condition=Q(highest_priority__isnull=True) | Q(highest_priority__lte=9),
                name="owner_policy_highest_priority_0_9",
            ),
        ]

    def __str__(self) -> str:
        return f"policy of {self.owner}"

    @property
    def queue_names(self) -> list[str]:
        """``queues`` as a list of names, in the order given."""
        return [name for name in (part.strip() for part in self.queues.split(",")) if name]


class SchedulerPartition(models.Model):
    """A lease on one partition of job ids (``job.id % PARTITIONS``): the scheduler whose
    lease is live materialises those jobs' cron runs (docs/architecture.md, "Daemons")."""

    number = models.PositiveIntegerField(primary_key=True)
    owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "jobs"

    def __str__(self) -> str:
        return f"partition {self.number} -> {self.owner or '-'}"


class IdempotencyKey(models.Model):
    """The first response to a POST that carried an ``Idempotency-Key`` header, so a retried
    request returns it instead of creating a second job (unique per owner and key)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10, default="POST")
    path = models.CharField(max_length=255)
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "jobs"
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_owner_key"),
        ]
        # The retention's prune of expired keys (runs/history/retention.py) finds them by age.
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]

    def __str__(self) -> str:
        return f"{self.owner_id}:{self.key}"
