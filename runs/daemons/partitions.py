"""Partition ownership by lease (docs/architecture.md, "Vocabulary" and "Daemons").

Job ids are split into ``PARTITIONS`` partitions (``job.id % PARTITIONS``). Each live
scheduler holds leases on about an equal share and renews them every tick; a dead
scheduler's partitions are free once its leases expire (PARTITION_TTL_S) and the others
take them. Ownership only spreads the work: correctness never depends on it, because
claims are fenced (``WHERE next_run_at = old``) and runs are unique per occurrence.
Changes of ownership are logged, counted and kept in a bounded history
(runs/daemons/ownership.py).
"""

import math

from django.db import transaction
from django.db.models import Q

from jobs.models import LeaseMember, SchedulerPartition
from runs.clock import db_now, seconds
from runs.daemons import ownership


class PartitionLeases:
    """The partitions held by scheduler ``owner`` (a unique string). ``model`` is the lease
    table: SchedulerPartition for schedulers, runs.models.ShardLease for dispatchers (which
    split queue shards the same way)."""

    def __init__(self, owner: str, total: int, ttl_s: float, using: str = "default",
                 model=SchedulerPartition):
        self.owner, self.total, self.ttl_s, self.using = owner, total, ttl_s, using
        self.model = model
        self.group = model._meta.label_lower
        self.owned: list[int] = []

    def _ensure_rows(self) -> None:
        rows = self.model.objects.using(self.using)
        if rows.filter(number__lt=self.total).count() < self.total:
            rows.bulk_create(
                [self.model(number=n) for n in range(self.total)],
                ignore_conflicts=True,
            )

    def refresh(self) -> list[int]:
        """Renew this scheduler's leases, take free ones up to a fair share
        (ceil(total / live schedulers)), give back any excess; returns the partitions now
        held, sorted."""
        self._ensure_rows()
        rows = self.model.objects.using(self.using).filter(number__lt=self.total)
        with transaction.atomic(using=self.using):
            now = db_now(self.using)
            expires = now + seconds(self.ttl_s)
            live = Q(lease_expires_at__gt=now)
            members = LeaseMember.objects.using(self.using).filter(group=self.group)
            members.filter(expires_at__lte=now).delete()
            members.update_or_create(group=self.group, member=self.owner,
                                     defaults={"expires_at": expires})
            owners = set(rows.filter(live).exclude(owner="").values_list("owner", flat=True))
            owners |= set(members.values_list("member", flat=True))
            share = math.ceil(self.total / len(owners | {self.owner}))
            mine = list(rows.filter(live, owner=self.owner).order_by("number")
                        .values_list("number", flat=True))
            changes = self._missing(set(self.owned) - set(mine), rows)
            if len(mine) > share:
                changes.given_back = mine[share:]
                rows.filter(number__in=mine[share:]).update(owner="", lease_expires_at=None)
                mine = mine[:share]
            elif len(mine) < share:
                free = list(
                    rows.filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now))
                    .order_by("number")
                    .select_for_update(skip_locked=True)
                    .values_list("number", "owner", "lease_expires_at")[: share - len(mine)]
                )
                mine += [number for number, _, _ in free]
                changes.taken = {number: (owner, expiry) for number, owner, expiry in free}
            rows.filter(number__in=mine).update(owner=self.owner, lease_expires_at=expires)
            ownership.record(self.group, self.owner, now, changes, self.using)
        self.owned = sorted(mine)
        return self.owned

    def _missing(self, numbers: set[int], rows) -> ownership.Changes:
        """What became of ``numbers``, held at the last refresh but not live now: lost to
        another holder, or lapsed (the lease expired and nobody took it)."""
        changes = ownership.Changes()
        if numbers:
            for number, owner, expiry in rows.filter(number__in=numbers).values_list(
                    "number", "owner", "lease_expires_at"):
                if owner and owner != self.owner:
                    changes.lost[number] = owner
                else:
                    changes.lapsed[number] = expiry
        return changes

    def release_all(self) -> None:
        """Give every partition back (clean shutdown), so others take them at once."""
        with transaction.atomic(using=self.using):
            held = self.model.objects.using(self.using).filter(owner=self.owner)
            numbers = list(held.values_list("number", flat=True))
            held.update(owner="", lease_expires_at=None)
            ownership.record(self.group, self.owner, db_now(self.using),
                             ownership.Changes(given_back=numbers, how="released"),
                             self.using)
        LeaseMember.objects.using(self.using).filter(group=self.group,
                                                     member=self.owner).delete()
        self.owned = []
