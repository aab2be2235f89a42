"""The owner concurrency limits the brokers enforce, read from the database
(jobs.models.OwnerPolicy.max_running). Changing a policy goes through
jobs.tenants.set_owner_policy, which syncs them to the broker at once; dispatchers also
re-sync them at every reconcile, which repairs a lost Redis."""

from jobs.models import OwnerPolicy


def owner_limits(using: str = "default") -> dict[int, int]:
    """Owner id -> most runs running at once, for every owner with an explicit limit
    (owners without one get SCHEDULER OWNER_CONCURRENCY)."""
    return dict(
        OwnerPolicy.objects.using(using).filter(max_running__isnull=False)
        .values_list("owner_id", "max_running")
    )
