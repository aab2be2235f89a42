"""Which alerts an owner (and a job) asks for, and raising them (docs/alerts.md).

``raise_alerts`` is called in the transaction that makes the thing alerted on happen (the
dead-letter transition, the scheduler's misfire skip, the dispatcher's late-start scan),
so an alert is stored exactly when its cause is, and a crash loses neither. It costs
queries only when something is alerted on: never on the path of a succeeded run.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from runs.alerts.models import AlertEvent, AlertKind, AlertPolicy
from runs.models import Run

DETAIL_MAX = 2000  # characters of a cause (an error with its traceback) kept on the alert
WEBHOOK_HANDLER = "http"  # webhooks are runs of it, in jobs named WEBHOOK_JOB_PREFIX + id
WEBHOOK_JOB_PREFIX = "alert webhook "


@dataclass(frozen=True)
class Effective:
    """What one (owner, job) pair asks for: channels (``email``, ``webhook``: the
    webhook only with a URL), events (``on_dead``, ``on_misfire``, ``late_after_s``, 0:
    no late-start alert) and the owner's webhook URL and secret."""

    email: bool = True
    webhook: bool = True
    on_dead: bool = True
    on_misfire: bool = False
    late_after_s: int = 0
    webhook_url: str = ""
    webhook_secret: str = ""

    def wants(self, kind: str) -> bool:
        """Whether alerts of ``kind`` (an AlertKind value) are asked for."""
        return {AlertKind.DEAD: self.on_dead, AlertKind.MISFIRE: self.on_misfire,
                AlertKind.LATE: self.late_after_s > 0}[kind]

    @property
    def channels(self) -> dict[str, bool]:
        """The pending flags an alert gets: ``{"email_pending": …, "webhook_pending": …}``."""
        return {"email_pending": self.email,
                "webhook_pending": self.webhook and bool(self.webhook_url)}


FIELDS = ("email", "webhook", "on_dead", "on_misfire", "late_after_s")


def merge(owner_row: AlertPolicy | None, job_row: AlertPolicy | None) -> Effective:
    """The owner's row over the defaults, then the job's non-null fields over that."""
    values = {}
    for row in (owner_row, job_row):
        if row is None:
            continue
        values.update({f: getattr(row, f) for f in FIELDS if getattr(row, f) is not None})
    if owner_row is not None:
        values.update(webhook_url=owner_row.webhook_url,
                      webhook_secret=owner_row.webhook_secret)
    return Effective(**values)


def effective(pairs: set[tuple[int, int | None]], using: str) -> dict[tuple, Effective]:
    """``{(owner id, job id or None): Effective}`` for ``pairs``, in one query."""
    owners = {owner for owner, _ in pairs}
    jobs = {job for _, job in pairs if job is not None}
    rows = AlertPolicy.objects.using(using).filter(Q(owner_id__in=owners) | Q(job_id__in=jobs))
    by_owner, by_job = {}, {}
    for row in rows:
        if row.owner_id is not None:
            by_owner[row.owner_id] = row
        else:
            by_job[row.job_id] = row
    return {(owner, job): merge(by_owner.get(owner), by_job.get(job))
            for owner, job in pairs}


def raise_alerts(kind: str, items: list[tuple[int | None, int | None, int | None, str]],
                 now: datetime, using: str, no_webhook: set[int] = frozenset()) -> int:
    """Store an alert of ``kind`` (AlertKind) for each ``(owner id, job id, run id,
    detail)`` whose owner's policy asks for it by some channel; call inside the
    transaction of its cause. Items without an owner are skipped (nobody to tell); a run
    alerted on before for the same kind is not alerted again; runs in ``no_webhook`` are
    not sent by webhook (webhook deliveries themselves: a dead webhook alerted by webhook
    would loop). Returns how many were stored (duplicates included)."""
    items = [item for item in items if item[0] is not None]
    if not items:
        return 0
    policies = effective({(owner, job) for owner, job, _, _ in items}, using)
    events = []
    for owner, job, run, detail in items:
        policy = policies[(owner, job)]
        channels = policy.channels
        if run in no_webhook:
            channels["webhook_pending"] = False
        if policy.wants(kind) and any(channels.values()):
            events.append(AlertEvent(owner_id=owner, job_id=job, run_id=run, kind=kind,
                                     detail=detail[:DETAIL_MAX], created_at=now, **channels))
    AlertEvent.objects.using(using).bulk_create(events, ignore_conflicts=True)
    return len(events)


def alert_dead(dead: list[tuple[int, int, str]], now: datetime, using: str) -> None:
    """The owners' alerts of runs just moved to the dead letter: ``dead`` holds ``(run
    id, attempt, error)``. In the transaction of the move (dead runs are rare: a query
    here costs the common path nothing)."""
    rows = Run.objects.using(using).filter(pk__in=[d[0] for d in dead]).values_list(
        "id", "job_id", "job__owner_id", "job__name", "job__handler")
    jobs = {run: (job, owner) for run, job, owner, _, _ in rows}
    deliveries = {run for run, _, _, name, handler in rows
                  if handler == WEBHOOK_HANDLER and name.startswith(WEBHOOK_JOB_PREFIX)}
    raise_alerts(AlertKind.DEAD, [
        (jobs[run_id][1], jobs[run_id][0], run_id,
         f"run {run_id} of job {jobs[run_id][0]} is in the dead letter after "
         f"attempt {attempt}: {error}")
        for run_id, attempt, error in dead if run_id in jobs], now, using, deliveries)
