"""The isolation settings and bounds of one owner (a tenant): OwnerPolicy
(docs/isolation.md, "Tenant bounds"); runs/tenancy/ applies them.
"""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from jobs.models.job import validate_queue_list


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
