"""The jobs app's models (docs/architecture.md, "Data model").

Jobs, schedules, owner policies and the lease tables are read by runs/ too, so they are
defined in scheduler_core/models.py (runs never imports jobs: docs/architecture.md, "Code
layout and dependency rule") and imported here, their home to Django, to jobs/ and to the
migrations. Only the models nothing in runs/ needs are defined here.
"""

from django.conf import settings
from django.db import models

from scheduler_core.models import (
    QUEUE_RE,
    Job,
    JobQuerySet,
    LeaseChangeCount,
    LeaseMember,
    LeaseTenure,
    MisfirePolicy,
    OwnerPolicy,
    Schedule,
    SchedulerPartition,
    validate_queue_list,
)

__all__ = ["IdempotencyKey", "Job", "JobQuerySet", "LeaseChangeCount", "LeaseMember",
           "LeaseTenure", "MisfirePolicy", "OwnerPolicy", "QUEUE_RE", "Schedule",
           "SchedulerPartition", "validate_queue_list"]


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
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_owner_key"),
        ]
        # The retention's prune of expired keys (runs/retention.py) finds them by age.
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]

    def __str__(self) -> str:
        return f"{self.owner_id}:{self.key}"
