"""How long the history is kept: finished runs, with their attempts and log lines, are
deleted once HISTORY_RETENTION_S has passed since they finished (docs/retention.md).

At 10 M runs a day the runs, attempts and log tables would otherwise grow without bound
(research/performance.md, "Run history grows without bound"), as every peer knows:
Celery expires results after a day, RQ after 500 s, django-q2 keeps the last 250
successes, procrastinate ships a task that removes old jobs.

What goes: runs ``succeeded`` or ``cancelled`` that finished before the cutoff, then the
one-off jobs left with no run at all. What stays: dead runs (the dead letter, until an
operator requeues or discards them), runs not finished, and every cron job. The
dispatcher prunes its own shards in batches (runs/dispatcher.py); ``manage.py
prunehistory`` does it on demand.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef

from jobs.models import Job
from runs.clock import db_now, seconds
from runs.models import Attempt, LogLine, Run, RunState
from runs.transitions import in_shards

PRUNABLE_STATES = (RunState.SUCCEEDED, RunState.CANCELLED)


@dataclass
class Pruned:
    """What one prune call deleted (counts of rows)."""

    runs: int = 0
    attempts: int = 0
    log_lines: int = 0
    jobs: int = 0

    def add(self, other: "Pruned") -> None:
        self.runs += other.runs
        self.attempts += other.attempts
        self.log_lines += other.log_lines
        self.jobs += other.jobs


def cutoff(retention_s: float, using: str = "default") -> datetime:
    """The instant (UTC, database clock) before which finished runs go, for a retention
    of ``retention_s`` seconds (> 0)."""
    return db_now(using) - seconds(retention_s)


def prunable(before: datetime, using: str = "default", shards: list[int] | None = None):
    """The runs a prune with cutoff ``before`` deletes (``shards``: only those; None:
    all). Served by the run_state_finished index (state, finished_at)."""
    runs = Run.objects.using(using).filter(state__in=PRUNABLE_STATES, finished_at__lt=before)
    return in_shards(runs, shards)


def prune(before: datetime, limit: int, using: str = "default",
          shards: list[int] | None = None) -> Pruned:
    """Delete at most ``limit`` runs finished (succeeded or cancelled) before ``before``
    (aware datetime), with their attempts and log lines, then the one-off jobs of those
    runs left with no run, in one transaction. Returns the counts deleted; fewer than
    ``limit`` runs means none are left to prune."""
    with transaction.atomic(using=using):
        # Locked (skipped if locked): a run being requeued or retried is not pruned under
        # it, and two dispatchers in a shard handover prune different runs.
        rows = list(prunable(before, using, shards).order_by()
                    .select_for_update(skip_locked=True)
                    .values_list("pk", "job_id")[:limit])
        if not rows:
            return Pruned()
        run_ids = [pk for pk, _ in rows]
        # Children first, so the deletes of their parents find nothing left to cascade to.
        attempts = Attempt.objects.using(using).filter(run_id__in=run_ids)
        log_lines, _ = LogLine.objects.using(using).filter(
            attempt_id__in=attempts.values("pk")).delete()
        attempt_count, _ = attempts.delete()
        _, deleted = Run.objects.using(using).filter(pk__in=run_ids).delete()
        has_runs = Exists(Run.objects.using(using).filter(job_id=OuterRef("pk")))
        _, jobs = (Job.objects.using(using)
                   .filter(pk__in={job_id for _, job_id in rows}, schedule__isnull=True)
                   .exclude(has_runs).delete())
        return Pruned(runs=deleted.get(Run._meta.label, 0), attempts=attempt_count,
                      log_lines=log_lines, jobs=jobs.get(Job._meta.label, 0))
