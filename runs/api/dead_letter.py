"""Requeue or discard the dead letter in bulk, by filter: ``POST /api/dead-letter/requeue/``
and ``/discard/`` (the views: runs/api/views.py) and ``manage.py deadletter`` (docs/api.md,
"Dead letter"). What requeue and discard do to a run is runs/services.py's, the admin's
actions' rule; this only picks the runs and applies it in batches."""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import batched

from runs import services
from runs.clock import db_now, seconds
from runs.models import Run, RunState

# Requeue only what is still dead when its row is locked: a run discarded (cancelled)
# after the filter listed it stays discarded, whoever discarded it.
ACTIONS = {"requeue": partial(services.requeue, states=(RunState.DEAD,)),
           "discard": services.discard}
DONE = {"requeue": "requeued", "discard": "discarded"}
BATCH = 500  # runs per transaction: a bulk over the whole dead letter never holds it all


@dataclass(frozen=True)
class DeadFilter:
    """Which dead runs: of ``queue``, of job ``job`` (id), whose job runs ``handler``, of
    jobs owned by ``owner`` (username), dead for more than ``older_than_s`` seconds (by
    ``finished_at``, database clock). None: any."""

    queue: str | None = None
    job: int | None = None
    handler: str | None = None
    owner: str | None = None
    older_than_s: float | None = None

    def select(self, runs=None, using: str = "default"):
        """The dead runs of ``runs`` (a Run queryset; default: all on ``using``) this
        filter picks."""
        runs = (Run.objects.using(using) if runs is None else runs).dead()
        if self.queue is not None:
            runs = runs.filter(queue=self.queue)
        if self.job is not None:
            runs = runs.filter(job_id=self.job)
        if self.handler is not None:
            runs = runs.filter(job__handler=self.handler)
        if self.owner is not None:
            runs = runs.filter(job__owner__username=self.owner)
        if self.older_than_s is not None:
            runs = runs.filter(finished_at__lt=db_now(using) - seconds(self.older_than_s))
        return runs


def apply(action: str, runs, using: str = "default",
          advance: Callable[[int], None] = lambda n: None) -> tuple[int, int]:
    """Apply ``action`` ("requeue" or "discard", raises KeyError for another) to the runs
    of queryset ``runs``, BATCH at a time, calling ``advance(n)`` after each batch of
    ``n``. Returns (runs matched, runs changed): a run may have left the dead letter
    meanwhile, and requeue leaves alone the runs of a job not active and those over their
    owner's pending-runs quota (runs/services.py)."""
    verb = ACTIONS[action]
    ids = list(runs.order_by("pk").values_list("pk", flat=True))
    changed = 0
    for chunk in batched(ids, BATCH):
        changed += verb(list(chunk), using=using)
        advance(len(chunk))
    return len(ids), changed
