"""Late-start alerts (docs/alerts.md): a run due for longer than its owner's (or job's)
``late_after_s`` that has not started is alerted on once. The dispatcher scans for them
every ALERT_POLL_S, only for the owners and jobs whose policy sets a threshold, so the
workers' lease and ack paths do nothing for it."""

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from runs.alerts.models import AlertEvent, AlertKind, AlertPolicy
from runs.alerts.policy import effective, raise_alerts
from runs.clock import db_now, seconds
from runs.models import PENDING_STATES, Run

SCAN_LIMIT = 1000  # late runs alerted on per scan; the rest at the next


def scan(using: str = "default") -> int:
    """Raise a late alert for each pending run of an active job past its threshold that
    has none yet, catch-up runs left out; returns how many were raised."""
    thresholds = list(AlertPolicy.objects.using(using).filter(late_after_s__gt=0)
                      .values_list("owner_id", "job_id", "late_after_s"))
    if not thresholds:
        return 0
    with transaction.atomic(using=using):
        now = db_now(using)
        shortest = min(t[2] for t in thresholds)
        whose = Q()
        for owner_id, job_id, _ in thresholds:
            whose |= Q(job__owner_id=owner_id) if owner_id else Q(job_id=job_id)
        alerted = AlertEvent.objects.using(using).filter(run_id=OuterRef("pk"),
                                                         kind=AlertKind.LATE)
        rows = list(
            # Catch-up runs are late on purpose, as in the lag (docs/cron.md, "Catch-up
            # runs"): a resume with catch_up would otherwise alert on each of them.
            Run.objects.using(using).filter(whose, state__in=PENDING_STATES,
                                            job__status="active", catch_up=False,
                                            run_at__lt=now - seconds(shortest))
            .filter(~Exists(alerted))
            .values_list("id", "job_id", "job__owner_id", "run_at", "created_at")[:SCAN_LIMIT])
        if not rows:
            return 0
        policies = effective({(owner, job) for _, job, owner, _, _ in rows}, using)
        items = []
        for run_id, job_id, owner_id, run_at, created_at in rows:
            limit = policies[(owner_id, job_id)].late_after_s
            # A run backdated before it existed waits from its creation (runs/models.py).
            waited = (now - max(run_at, created_at)).total_seconds()
            if limit and waited > limit:
                items.append((owner_id, job_id, run_id,
                              f"run {run_id} of job {job_id} has waited {waited:.0f} s past "
                              f"its run_at without starting (threshold {limit} s)"))
        return raise_alerts(AlertKind.LATE, items, now, using)
