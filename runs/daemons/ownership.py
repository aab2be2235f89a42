"""The trace ownership changes leave: who held which scheduler partition or dispatcher
shard, from when to when, and how it changed hands (docs/architecture.md, "Ownership
changes").

PartitionLeases.refresh (runs/daemons/partitions.py) works out what changed in each refresh and
calls ``record`` in its transaction, which

* logs it: INFO by the winner (it took free leases, took over expired ones from another
  holder, gave some back for a fair share), WARNING by the loser when it notices (its
  leases went to another holder, or lapsed);
* counts it in LeaseChangeCount, which /metrics exposes as Prometheus counters
  (``scheduler_lease_changes_total{kind, event}``);
* keeps it in LeaseTenure, a history capped to the newest HISTORY_ROWS rows per group,
  which the admin dashboard shows.

Nothing is written while ownership stays the same, so a refresh costs what it did.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import F

from jobs.models import LeaseChangeCount, LeaseTenure

log = logging.getLogger("scheduler.ownership")

HISTORY_ROWS = 1000  # newest tenures kept per group (schedulers' partitions, dispatchers')
KINDS = {"jobs.schedulerpartition": "partition", "runs.shardlease": "shard"}
EVENTS = ("acquired", "taken_over", "lost", "lapsed", "released", "rebalanced")


@dataclass
class Changes:
    """What one refresh of ``owner``'s leases changed. ``taken``: number -> (previous
    holder, blank if none, and when its lease expired, None if it had none); ``lost``:
    number -> who holds it now (its lease went to them while ``owner`` believed it held
    it); ``lapsed``: number -> when ``owner``'s own lease on it expired unnoticed (nobody
    took it); ``given_back``: numbers returned for a fair share (``how`` "rebalanced") or
    at a clean stop ("released")."""

    taken: dict[int, tuple[str, datetime | None]] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)
    lapsed: dict[int, datetime | None] = field(default_factory=dict)
    given_back: list[int] = field(default_factory=list)
    how: str = "rebalanced"

    def __bool__(self) -> bool:
        return bool(self.taken or self.lost or self.lapsed or self.given_back)


def kind_of(group: str) -> str:
    """"partition" or "shard" for a lease group (a model's ``_meta.label_lower``)."""
    return KINDS.get(group, group)


def record(group: str, owner: str, now: datetime, changes: Changes,
           using: str = "default") -> None:
    """Log, count and keep ``changes`` of ``owner``'s leases in ``group`` at ``now``
    (database clock). Call inside the refresh's transaction."""
    if not changes:
        return
    _log(group, owner, changes)
    tenures = LeaseTenure.objects.using(using).filter(group=group, ended_at__isnull=True)
    for number, at in changes.lapsed.items():
        tenures.filter(number=number, owner=owner).update(
            ended_at=at or now, ended_how="expired")
    for number, holder in changes.lost.items():
        # The winner closed it when it took it; this covers a winner of an older version.
        tenures.filter(number=number, owner=owner).update(
            ended_at=now, ended_how="expired", taken_by=holder)
    if changes.given_back:
        tenures.filter(number__in=changes.given_back, owner=owner).update(
            ended_at=now, ended_how=changes.how)
    for number, (previous, expired_at) in changes.taken.items():
        tenures.filter(number=number).update(
            ended_at=expired_at or now, ended_how="expired",
            taken_by="" if previous == owner else owner)
    if changes.taken:
        LeaseTenure.objects.using(using).bulk_create([
            LeaseTenure(group=group, number=number, owner=owner, started_at=now)
            for number in sorted(changes.taken)])
        _cap(group, using)
    _count(group, changes, owner, using)


def _log(group: str, owner: str, changes: Changes) -> None:
    kind = kind_of(group)
    by_holder: dict[str, list[int]] = {}
    for number, holder in sorted(changes.lost.items()):
        by_holder.setdefault(holder, []).append(number)
    for holder, numbers in by_holder.items():
        log.warning("%s lost %ss %s to %s (its lease on them had expired)", owner, kind,
                    numbers, holder)
    if changes.lapsed:
        log.warning("%s: its lease on %ss %s had expired unnoticed (stalled or cut off "
                    "from the database?)", owner, kind, sorted(changes.lapsed))
    from_others: dict[str, list[int]] = {}
    for number, (previous, _) in sorted(changes.taken.items()):
        if previous and previous != owner:
            from_others.setdefault(previous, []).append(number)
    for previous, numbers in from_others.items():
        log.info("%s took over %ss %s from %s (its lease had expired)", owner, kind,
                 numbers, previous)
    free = sorted(n for n, (previous, _) in changes.taken.items()
                  if not previous or previous == owner)
    if free:
        log.info("%s took %ss %s", owner, kind, free)
    if changes.given_back:
        log.info("%s gave back %ss %s (%s)", owner, kind, sorted(changes.given_back),
                 changes.how)


def _count(group: str, changes: Changes, owner: str, using: str) -> None:
    taken_over = sum(1 for previous, _ in changes.taken.values()
                     if previous and previous != owner)
    counts = {"acquired": len(changes.taken) - taken_over, "taken_over": taken_over,
              "lost": len(changes.lost), "lapsed": len(changes.lapsed),
              changes.how: len(changes.given_back)}
    rows = LeaseChangeCount.objects.using(using)
    rows.bulk_create([LeaseChangeCount(group=group, event=e) for e in EVENTS],
                     ignore_conflicts=True)
    for event, n in counts.items():
        if n:
            rows.filter(group=group, event=event).update(count=F("count") + n)


def _cap(group: str, using: str) -> None:
    """Delete the group's tenures older than its newest HISTORY_ROWS (ids grow with
    time)."""
    rows = LeaseTenure.objects.using(using).filter(group=group)
    cutoff = list(rows.order_by("-pk").values_list("pk", flat=True)[HISTORY_ROWS:
                                                                      HISTORY_ROWS + 1])
    if cutoff:
        rows.filter(pk__lte=cutoff[0]).delete()


def counters(using: str = "default") -> list[tuple[str, str, int]]:
    """``(kind, event, count)`` of every ownership change counted so far."""
    return [(kind_of(group), event, count) for group, event, count in
            LeaseChangeCount.objects.using(using).order_by("group", "event")
            .values_list("group", "event", "count")]


def history(limit: int = 50, using: str = "default") -> list[dict]:
    """The newest ``limit`` tenures, JSON-able, newest first: kind, number, owner,
    started_at, ended_at (None: still held), ended_how, taken_by."""
    rows = LeaseTenure.objects.using(using).order_by("-started_at", "-pk")[:limit]
    return [{"kind": kind_of(t.group), "number": t.number, "owner": t.owner,
             "started_at": t.started_at.isoformat(),
             "ended_at": t.ended_at.isoformat() if t.ended_at else None,
             "ended_how": t.ended_how, "taken_by": t.taken_by} for t in rows]
