"""The many-daemons scenario: three schedulers, three dispatchers and three workers, each
daemon its own process tree as on three hosts, against one Redis Cluster and one
PostgreSQL; the schedulers and the dispatchers are stopped and started in turns, so
partitions and shards change hands all through the load (docs/reliability.md,
"Scenarios"; docs/architecture.md, "Ownership changes").

The moves are read from the ownership trace the daemons leave (runs/daemons/ownership.py): the
holds (LeaseTenure) that started during the scenario and the change counters
(LeaseChangeCount) before and after it.
"""

import signal
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from chaos.load import with_db_retry
from chaos.redis_cluster import RedisCluster
from chaos.session import Scenario, Session, Size
from jobs.models import LeaseTenure
from runs.clock import db_now
from runs.daemons import ownership
from runs.models import Attempt, AttemptOutcome

GROUPS = {"jobs.schedulerpartition": "partition", "runs.shardlease": "shard"}
LEASE_TTL_S = 5  # partitions' (CHAOS_TUNABLES) and shards' (tunables below)
# Two lease refreshes can read the database clock a transaction apart: a hold that starts
# up to this long before the previous one was recorded ended is that race, not two holders.
OVERLAP_ALLOWED_S = 1.0


class ManyDaemons(Scenario):
    """Every 1-2 s, in turn, a scheduler or a dispatcher (round robin over the three of
    each) is stopped: SIGKILL in one round of the two kinds, SIGTERM in the next. A killed
    one stays down past its lease (its twins take its partitions or shards over when the
    lease expires), a stopped one a few seconds (it gave them back at once); then it
    starts again under a new pid and takes back a fair share. The load is spread over 8
    shards of one queue by 64 shard keys."""

    name = "many-daemons"
    schedulers = 3
    dispatchers = 3
    tunables = {"SHARDS": 8, "SHARD_LEASE_TTL_S": LEASE_TTL_S}
    shard_keys = 64
    short = Size(one_off=650, cron=48, duration_s=48, workers=3, concurrency=2)
    long = Size(one_off=15_000, cron=500, duration_s=240, workers=3, concurrency=3)
    # A killed holder stays down 6 s past its lease: at 3 s, a twin slowed by a loaded
    # machine could still be waiting for its next refresh when the victim came back and
    # took its own expired leases again, and the scenario saw no takeover (CI, load 5-8).
    # The short window (48 s) holds five turns, so two different schedulers are killed.
    DOWN_S = {signal.SIGKILL: LEASE_TTL_S + 6, signal.SIGTERM: 3}

    def redis_server(self, workdir: Path) -> RedisCluster:
        return RedisCluster(workdir=workdir / "redis-cluster")

    def inject(self, s: Session) -> None:
        s.extra["since"] = with_db_retry(db_now)
        s.extra["counters"] = with_db_retry(_counters)
        turn = 0
        while True:
            kind = ("scheduler", "dispatcher")[turn % 2]
            how = (signal.SIGKILL, signal.SIGTERM)[turn // 2 % 2]
            if s.left() < 2 + self.DOWN_S[how]:
                break
            s.tick(s.rng.uniform(1.0, 2.0))
            daemons = s.cluster.of_kind(kind)
            victim = daemons[turn // 2 % len(daemons)]
            s.fault(how.name, victim.name)
            victim.keep_down = True  # the harness's restarts wait for the turn's end
            s.cluster.kill(victim, how)
            s.tick(self.DOWN_S[how])
            victim.keep_down = False
            turn += 1
        s.until_deadline()

    def verify(self, s: Session) -> None:
        if "since" not in s.extra:
            s.result.failures.append("the fault window closed before the first turn")
            return
        holds = _holds_since(s.extra["since"])
        counted = _delta(s.extra["counters"], _counters())
        figures = {}
        for group, kind in GROUPS.items():
            moves, holders, overlaps = _moves(holds.get(group, []))
            events = counted.get(kind, {})
            figures[f"{kind}_moves"] = moves
            s.result.notes.append(
                f"{kind}s: {moves} holds passed to another holder, {holders} holders over "
                f"the scenario; change counters {dict(sorted(events.items()))}")
            if not moves or not events.get("taken_over"):
                s.result.failures.append(f"no {kind} changed hands after a holder died "
                                         f"(moves {moves}, counters {events})")
            for number, gap in overlaps:
                s.result.failures.append(f"{kind} {number}: a hold started {gap:.3f} s "
                                         f"before the previous one ended (two holders)")
        figures["throughput_runs_per_s"] = _throughput(s)
        s.result.figures.update(figures)
        s.result.notes.append(f"throughput: {figures['throughput_runs_per_s']} runs/s from "
                              f"the first start to the last successful finish")


def _holds_since(since: datetime) -> dict[str, list[tuple[int, str, datetime, datetime]]]:
    """The holds of each lease group that started at or after ``since`` or were still
    open then: (number, owner, started_at, ended_at or None), by number and start."""
    rows = (LeaseTenure.objects.filter(group__in=list(GROUPS))
            .exclude(ended_at__lt=since).order_by("group", "number", "started_at", "pk")
            .values_list("group", "number", "owner", "started_at", "ended_at"))
    out = defaultdict(list)
    for group, number, owner, started, ended in rows:
        out[group].append((number, owner, started, ended))
    return out


def _moves(holds) -> tuple[int, int, list[tuple[int, float]]]:
    """Over one group's holds: how many passed to a different holder, how many holders
    there were, and each (number, overlap in s) where a hold began more than
    OVERLAP_ALLOWED_S before the one before it ended (or while it was still open)."""
    moves, overlaps = 0, []
    previous: dict[int, tuple[str, datetime | None]] = {}
    for number, owner, started, ended in holds:
        if number in previous:
            before, before_end = previous[number]
            moves += before != owner
            gap = ((before_end - started).total_seconds() if before_end is not None
                   else float("inf"))
            if gap > OVERLAP_ALLOWED_S:
                overlaps.append((number, gap))
        previous[number] = (owner, ended)
    return moves, len({owner for _, owner, _, _ in holds}), overlaps


def _counters() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for kind, event, count in ownership.counters():
        out[kind][event] = count
    return out


def _delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    return {kind: {event: n - before.get(kind, {}).get(event, 0)
                   for event, n in events.items() if n - before.get(kind, {}).get(event, 0)}
            for kind, events in after.items()}


def _throughput(s: Session) -> float:
    """Runs per second the workers finished: successful attempts of the owner over the
    span from the first attempt's start to the last successful finish (database clock)."""
    attempts = Attempt.objects.filter(run__job__owner=s.user)
    first = attempts.order_by("started_at").values_list("started_at", flat=True).first()
    done = attempts.filter(outcome=AttemptOutcome.SUCCEEDED)
    last = done.order_by("-finished_at").values_list("finished_at", flat=True).first()
    if first is None or last is None or last <= first:
        return 0.0
    return round(done.count() / (last - first).total_seconds(), 1)
