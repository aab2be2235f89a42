"""Read-only figures about queues and workers, for /api/queues/, the dashboard and
metrics: one place so every view reports the same numbers."""

from dataclasses import asdict, dataclass
from datetime import timedelta

from django.db.models import Min

from jobs import conf
from runs.brokers import get_broker
from runs.clock import db_now
from runs.models import PENDING_STATES, Run, WorkerProcess


@dataclass(frozen=True)
class QueueStats:
    """One queue: ``ready``/``delayed``/``leased`` depth in the broker, the age in seconds
    of the oldest run that is due and not started (None when none is), and live workers
    serving it."""

    queue: str
    ready: int
    delayed: int
    leased: int
    oldest_ready_age_s: float | None
    live_workers: int

    def as_dict(self) -> dict:
        return asdict(self)


def live_workers(using: str = "default"):
    """Workers that heartbeated within three heartbeat intervals and did not stop."""
    since = db_now(using) - timedelta(seconds=3 * conf.heartbeat_interval())
    return WorkerProcess.objects.using(using).filter(
        last_heartbeat_at__gte=since, stopped_at__isnull=True
    )


def queue_stats(using: str = "default") -> list[QueueStats]:
    """Depth, oldest ready age and live workers for every queue the broker knows."""
    now = db_now(using)
    depth = {d.queue: d for d in get_broker(using).depth()}
    # Due and not started, whatever the label: the Redis broker moves a run pushed when
    # already due straight to ready, while its row may still say "scheduled".
    oldest = dict(
        Run.objects.using(using).filter(state__in=PENDING_STATES, run_at__lte=now)
        .values("queue").annotate(oldest=Min("run_at")).values_list("queue", "oldest")
    )
    serving: dict[str, int] = {}
    for queues in live_workers(using).values_list("queues", flat=True):
        for queue in queues:
            serving[queue] = serving.get(queue, 0) + 1
    names = sorted(set(depth) | set(oldest) | set(serving))
    stats = []
    for name in names:
        d = depth.get(name)
        age = (now - oldest[name]).total_seconds() if name in oldest else None
        stats.append(QueueStats(
            queue=name, ready=d.ready if d else 0, delayed=d.delayed if d else 0,
            leased=d.leased if d else 0,
            oldest_ready_age_s=round(max(age, 0.0), 3) if age is not None else None,
            live_workers=serving.get(name, 0),
        ))
    return stats
