"""The tables of owner alerts (docs/alerts.md): who wants which alert by which channel,
the alerts waiting to be delivered, and each channel's last delivery (the digest window).

They belong to the runs app (``app_label``) and are imported by runs/models.py; the
alerts are raised by the engine (dead letter, late starts) and by the scheduler (misfire
skips), and delivered by the dispatcher (runs/alerts/deliver.py).
"""

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q


class AlertKind(models.TextChoices):
    DEAD = "dead"  # a run's attempts are exhausted: it is in the dead letter
    MISFIRE = "misfire"  # a cron occurrence skipped by its schedule's misfire policy
    LATE = "late"  # a due run has waited longer than the threshold without starting


class Channel(models.TextChoices):
    EMAIL = "email"
    WEBHOOK = "webhook"


def new_secret() -> str:
    """A webhook signing secret: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


class AlertPolicy(models.Model):
    """Which alerts an owner wants, by which channel: one row per owner (``owner`` set,
    ``job`` null) and optionally one per job (``job`` set) that overrides it. On a job's
    row a null field means "as the owner's row says"; an owner without a row gets the
    defaults of docs/alerts.md (dead letter by email, nothing else). The webhook URL and
    its secret are the owner's only."""

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True,
                                 on_delete=models.CASCADE, related_name="alert_policy")
    # No database constraint: the history prune deletes one-off jobs with plain
    # statements (runs/history/retention.py), and removes their policies itself.
    job = models.OneToOneField("jobs.Job", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="alert_policy", db_constraint=False)
    email = models.BooleanField(null=True, blank=True,
                                help_text="send alerts to the owner's email address")
    webhook = models.BooleanField(null=True, blank=True,
                                  help_text="POST alerts to the owner's webhook URL")
    on_dead = models.BooleanField(null=True, blank=True,
                                  help_text="alert when a run lands in the dead letter")
    on_misfire = models.BooleanField(
        null=True, blank=True,
        help_text="alert when the misfire policy skips a cron occurrence")
    late_after_s = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="alert when a due run has not started this many seconds after its "
                  "run_at (0: never)")
    webhook_url = models.URLField(max_length=2000, blank=True, default="")
    webhook_secret = models.CharField(max_length=100, blank=True, default=new_secret)

    class Meta:
        app_label = "runs"
        verbose_name_plural = "alert policies"
        constraints = [
            models.CheckConstraint(
                condition=(Q(owner__isnull=False, job__isnull=True)
                           | Q(owner__isnull=True, job__isnull=False)),
                name="alertpolicy_owner_xor_job"),
        ]

    def __str__(self) -> str:
        return f"alerts of job {self.job_id}" if self.job_id else f"alerts of {self.owner}"


class AlertEvent(models.Model):
    """One alert raised for ``owner``, waiting per channel to be delivered
    (``email_pending``, ``webhook_pending``: set when raised for the channels the policy
    asks for, cleared when delivered alone or in a digest). Written in the transaction
    that raised it, so a crash loses no alert; ``run`` is unique per kind, so an alert is
    raised once per run however often it is looked at."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="+")
    # The ids stay when the history prune deletes the run or its one-off job with plain
    # statements (runs/history/retention.py): no database constraint, nothing to cascade.
    job = models.ForeignKey("jobs.Job", null=True, on_delete=models.DO_NOTHING,
                            related_name="+", db_index=False, db_constraint=False)
    run = models.ForeignKey("runs.Run", null=True, on_delete=models.DO_NOTHING,
                            related_name="+", db_index=False, db_constraint=False)
    kind = models.CharField(max_length=16, choices=AlertKind.choices)
    detail = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    email_pending = models.BooleanField(default=False)
    webhook_pending = models.BooleanField(default=False)

    class Meta:
        app_label = "runs"
        indexes = [
            models.Index(fields=["owner", "id"], name="alertevent_email_pending",
                         condition=Q(email_pending=True)),
            models.Index(fields=["owner", "id"], name="alertevent_webhook_pending",
                         condition=Q(webhook_pending=True)),
        ]
        constraints = [
            models.UniqueConstraint(fields=["run", "kind"], name="alertevent_once_per_run"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} alert {self.pk} of run {self.run_id}"


class AlertChannelState(models.Model):
    """When ``owner``'s ``channel`` last sent something: at most one message per
    ALERT_DIGEST_WINDOW_S follows it (docs/alerts.md, "Bursts")."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="+")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    last_sent_at = models.DateTimeField()
    messages = models.PositiveIntegerField(default=0)

    class Meta:
        app_label = "runs"
        constraints = [models.UniqueConstraint(fields=["owner", "channel"],
                                               name="alertchannelstate_once")]

    def __str__(self) -> str:
        return f"{self.channel} of owner {self.owner_id}: last sent {self.last_sent_at}"


class OutcomeCount(models.Model):
    """Runs by outcome since the table was created, per queue: the Prometheus counter
    ``scheduler_runs_total`` (runs/metrics/endpoint.py). Workers and dispatchers add what they
    counted in memory every few seconds (never per run; docs/alerts.md, "Metrics")."""

    queue = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)

    class Meta:
        app_label = "runs"
        constraints = [models.UniqueConstraint(fields=["queue", "outcome"],
                                               name="outcomecount_once")]

    def __str__(self) -> str:
        return f"{self.queue} {self.outcome}: {self.count}"


class DaemonErrorCount(models.Model):
    """Failures of one item (an alert, a cron job, a workflow) or of a whole duty that a
    daemon survived, per daemon and duty, since the table was created: the Prometheus
    counter ``scheduler_daemon_item_errors_total`` (runs/daemons/isolation.py,
    docs/security.md, "Daemons' fault isolation")."""

    daemon = models.CharField(max_length=32)
    duty = models.CharField(max_length=32)
    count = models.BigIntegerField(default=0)

    class Meta:
        app_label = "runs"
        constraints = [models.UniqueConstraint(fields=["daemon", "duty"],
                                               name="daemonerrorcount_once")]

    def __str__(self) -> str:
        return f"{self.daemon} {self.duty}: {self.count}"
