"""Per-owner isolation settings stored in the database (jobs.models.OwnerPolicy): the
owner limits brokers enforce, and the owner's default queue (tenant queues). Changing a
policy goes through ``set_owner_policy`` so the broker learns it at once; dispatchers also
re-sync the limits at every reconcile, which repairs a lost Redis."""

from django.db import transaction

from jobs.exceptions import SchedulerError
from jobs.models import OwnerPolicy
from jobs.validation import QUEUE_RE
from runs.brokers import get_broker

MAX_RUNNING = 2**31 - 1  # the column's range (PositiveIntegerField)


def owner_limits(using: str = "default") -> dict[int, int]:
    """Owner id -> most runs running at once, for every owner with an explicit limit
    (owners without one get SCHEDULER OWNER_CONCURRENCY)."""
    return dict(
        OwnerPolicy.objects.using(using).filter(max_running__isnull=False)
        .values_list("owner_id", "max_running")
    )


def default_queue(owner_id: int | None, using: str = "default") -> str:
    """The queue a job of ``owner_id`` goes to when it names none: the owner's
    ``default_queue`` if set, else "default"."""
    if owner_id is None:
        return "default"
    queue = (OwnerPolicy.objects.using(using).filter(owner_id=owner_id)
             .values_list("default_queue", flat=True).first())
    return queue or "default"


def sync_owner_limits(using: str = "default") -> None:
    """Make the broker enforce the owner limits stored now (after the transaction commits
    if one is open). A broker outage is logged: the dispatcher's next reconcile syncs."""
    broker = get_broker(using)
    transaction.on_commit(
        lambda: broker._after_commit(broker.sync_limits, owner_limits(using)), using=using)


def set_owner_policy(owner, *, max_running: int | None = None, default_queue: str = "",
                     using: str = "default") -> OwnerPolicy:
    """Create or replace ``owner``'s policy (``owner``: a user). ``max_running``: a
    positive int or None (the settings default); ``default_queue``: a queue name or "".
    Raises SchedulerError naming the bad value; the broker enforces the new limit once the
    transaction commits."""
    if max_running is not None and (isinstance(max_running, bool)
                                    or not isinstance(max_running, int)
                                    or not 1 <= max_running <= MAX_RUNNING):
        raise SchedulerError(f"max_running must be an integer from 1 to {MAX_RUNNING} or "
                             f"null, not {max_running!r}")
    if default_queue and not (isinstance(default_queue, str) and QUEUE_RE.match(default_queue)):
        raise SchedulerError(f"default_queue {default_queue!r} is not a valid queue name")
    with transaction.atomic(using=using):
        policy, _ = OwnerPolicy.objects.using(using).update_or_create(
            owner=owner, defaults={"max_running": max_running, "default_queue": default_queue})
        sync_owner_limits(using)
    return policy
