"""The record of a backfill: runs made on purpose for past occurrences of a cron job
(docs/cron.md, "Backfill"). One row per request, kept as its history and as the
progress the admin shows while it is made: ``total`` occurrences in the range, ``made``
new runs, ``skipped`` occurrences that already had one. How many of the made runs have
finished is counted from the runs themselves (jobs/schedules/backfill.py, ``finished_count``).

The abstract base is shared with workflows/backfill.py's ``WorkflowBackfill``.
"""

from django.conf import settings
from django.db import models

from scheduler_core.models import Job


class BackfillBase(models.Model):
    """What every backfill records. ``start`` (inclusive) and ``end`` (exclusive) are the
    asked range, aware UTC; ``requested_by`` the user who asked (None from the command);
    ``done_at`` when the last occurrence was made (None while it is being made, or when
    it stopped early: ``error`` then says why)."""

    start = models.DateTimeField()
    end = models.DateTimeField()
    total = models.PositiveIntegerField(default=0)
    made = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+", db_index=False)
    created_at = models.DateTimeField(auto_now_add=True)
    done_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        abstract = True


class Backfill(BackfillBase):
    """A backfill of one cron job; its runs carry its id in ``Run.backfill_id``."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="backfills")

    class Meta:
        app_label = "jobs"

    def __str__(self) -> str:
        return f"backfill {self.pk} of job {self.job_id}"
