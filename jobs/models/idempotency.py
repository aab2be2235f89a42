"""The stored first responses of POSTs that carried an ``Idempotency-Key`` header
(docs/api.md); runs/history/retention.py prunes the expired ones.
"""

from django.conf import settings
from django.db import models


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
