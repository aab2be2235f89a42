"""The database broker: the embedded default (DESIGN.md, "The database broker").

The runs table is the working set: delayed = ``scheduled``/``retrying`` rows, ready =
``queued`` rows, leased = ``running`` rows. Claims use ``SELECT ... FOR UPDATE SKIP
LOCKED`` on PostgreSQL; on SQLite the lease transaction is IMMEDIATE (settings), which
serialises writers, so the same query is safe there.
"""

from django.db import transaction
from django.db.models import Count, Q

from jobs import conf
from runs.brokers.base import Broker
from runs.clock import db_now
from runs.models import DELAYED_STATES, Run, RunState
from runs.types import QueueDepth, RunRef, Slot


class DatabaseBroker(Broker):
    """Serve the broker contract from the runs table alone (no Redis)."""

    name = "database"

    def push(self, runs: list[RunRef]) -> None:
        """Nothing to copy: the rows are the working set. Due runs are promoted at once so
        that a run triggered now does not wait for the dispatcher's next round."""
        if runs:
            self.promote()

    def promote(self, limit: int | None = None) -> int:
        limit = limit or conf.get("PROMOTE_BATCH")
        runs = Run.objects.using(self.using)
        with transaction.atomic(using=self.using):
            ids = list(
                runs.filter(state__in=DELAYED_STATES, run_at__lte=db_now(self.using))
                .order_by("run_at")
                .select_for_update(skip_locked=True)
                .values_list("pk", flat=True)[:limit]
            )
            if not ids:
                return 0
            return runs.filter(pk__in=ids, state__in=DELAYED_STATES).update(
                state=RunState.QUEUED
            )

    def reconcile(self, batch: int = 5000) -> int:
        """Nothing can be lost: the runs table is the working set."""
        return 0

    def _claim(self, queues: list[str], n: int) -> list[Slot]:
        return list(
            Run.objects.using(self.using)
            .filter(state=RunState.QUEUED, queue__in=queues, job__status="active")
            .order_by("priority", "run_at", "pk")
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("pk", "queue", "shard")[:n]
        )

    def depth(self) -> list[QueueDepth]:
        rows = (
            Run.objects.using(self.using)
            .filter(state__in=[*DELAYED_STATES, RunState.QUEUED, RunState.RUNNING])
            .values("queue")
            .annotate(
                ready=Count("pk", filter=Q(state=RunState.QUEUED)),
                delayed=Count("pk", filter=Q(state__in=DELAYED_STATES)),
                leased=Count("pk", filter=Q(state=RunState.RUNNING)),
            )
            .order_by("queue")
        )
        return [QueueDepth(r["queue"], r["ready"], r["delayed"], r["leased"]) for r in rows]
