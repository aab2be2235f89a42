"""The lease tables of the daemons: the scheduler's partitions of job ids, the members of
each lease group (schedulers sharing partitions, dispatchers sharing shards), who held
which partition or shard when, and the count of ownership changes (docs/architecture.md,
"Daemons" and "Ownership changes"). runs/daemons/ takes and renews them.
"""

from django.db import models


class SchedulerPartition(models.Model):
    """A lease on one partition of job ids (``job.id % PARTITIONS``): the scheduler whose
    lease is live materialises those jobs' cron runs (docs/architecture.md, "Daemons")."""

    number = models.PositiveIntegerField(primary_key=True)
    owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "jobs"

    def __str__(self) -> str:
        return f"partition {self.number} -> {self.owner or '-'}"


class LeaseMember(models.Model):
    """A live member of a lease group (schedulers sharing partitions, dispatchers sharing
    shards): ``expires_at`` is renewed with the member's leases. Members count even while
    they hold nothing, so a newcomer's fair share is given up by the others."""

    group = models.CharField(max_length=64)
    member = models.CharField(max_length=200)
    expires_at = models.DateTimeField()

    class Meta:
        app_label = "jobs"
        constraints = [
            models.UniqueConstraint(fields=["group", "member"], name="lease_member_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.group}: {self.member}"


class LeaseTenure(models.Model):
    """One holder's hold on partition or shard ``number`` of lease ``group`` (as
    LeaseMember): from ``started_at`` to ``ended_at`` (null: still held) and how it ended:
    ``released`` (clean stop), ``rebalanced`` (given back for a fair share) or
    ``expired`` (the lease ran out; ``taken_by`` is who took it next, blank if the holder
    took it back itself). A bounded history (runs/daemons/ownership.py, docs/architecture.md)."""

    group = models.CharField(max_length=64)
    number = models.PositiveIntegerField()
    owner = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_how = models.CharField(max_length=16, blank=True, default="")
    taken_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        app_label = "jobs"
        indexes = [models.Index(fields=["group", "number", "ended_at"],
                                name="lease_tenure_open")]

    def __str__(self) -> str:
        return f"{self.group} {self.number}: {self.owner}"


class LeaseChangeCount(models.Model):
    """How many ownership changes of ``event`` lease ``group`` has seen since the table
    was created: the Prometheus counters of /metrics (runs/daemons/ownership.py)."""

    group = models.CharField(max_length=64)
    event = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)

    class Meta:
        app_label = "jobs"
        constraints = [
            models.UniqueConstraint(fields=["group", "event"], name="lease_change_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.group} {self.event}: {self.count}"
