"""The record of a backfill: runs made on purpose for past occurrences of a cron job
(docs/cron.md, "Backfill"). One row per request, kept as its history and as the
progress the admin shows while it is made: ``total`` occurrences in the range, ``made``
new runs, ``skipped`` occurrences that already had one. How many of the made runs have
finished is counted from the runs themselves (jobs/schedules/backfill.py, ``finished_count``).

The abstract base is shared with workflows/models.py's ``WorkflowBackfill``.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models

from jobs.models.job import Job

# A backfill not done, without an error and without progress for this long is shown
# stopped: its process died (a request past gunicorn's timeout, a crash) between chunks
# or in one. A chunk (jobs/schedules/backfill.py, CHUNK) takes seconds; a live backfill
# shown stopped only means a rerun, which makes nothing twice.
STOPPED_AFTER = timedelta(minutes=5)


class BackfillBase(models.Model):
    """What every backfill records. ``start`` (inclusive) and ``end`` (exclusive) are the
    asked range, aware UTC; ``requested_by`` the user who asked (None from the command);
    ``done_at`` when the last occurrence was made (None while it is being made, or when
    it stopped early: ``error`` then says why); ``progress_at`` when its last chunk
    committed (its heartbeat: the row is made with the first chunk, see ``state``)."""

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
    progress_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def state(self, now: datetime) -> str:
        """"done", "failed" (``error`` says why), "making", or "stopped": not done, no
        error and no chunk committed for STOPPED_AFTER before ``now`` (an aware
        datetime), its process gone; running it again makes only what is missing."""
        if self.done_at is not None:
            return "done"
        if self.error:
            return "failed"
        last = self.progress_at or self.created_at
        return "making" if now - last < STOPPED_AFTER else "stopped"


class Backfill(BackfillBase):
    """A backfill of one cron job; its runs carry its id in ``Run.backfill_id``."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="backfills")

    class Meta:
        app_label = "jobs"

    def __str__(self) -> str:
        return f"backfill {self.pk} of job {self.job_id}"
