"""The owner concurrency limits the brokers enforce, read from the database
(jobs.models.OwnerPolicy.max_running). Changing a policy goes through
jobs.tenants.set_owner_policy, which syncs them to the broker at once; dispatchers also
re-sync them at every reconcile, which repairs a lost Redis."""

from django.db import transaction

from jobs.models import OwnerPolicy
from runs.brokers import get_broker


def owner_limits(using: str = "default") -> dict[int, int]:
    """Owner id -> most runs running at once, for every owner with an explicit limit
    (owners without one get SCHEDULER OWNER_CONCURRENCY)."""
    return dict(
        OwnerPolicy.objects.using(using).filter(max_running__isnull=False)
        .values_list("owner_id", "max_running")
    )


def sync_owner_limits(using: str = "default") -> None:
    """Make the broker enforce the owner limits stored now (after the transaction commits
    if one is open). A broker outage is logged: the dispatcher's next reconcile syncs."""
    broker = get_broker(using)
    transaction.on_commit(
        lambda: broker._after_commit(broker.sync_limits, owner_limits(using)), using=using)
