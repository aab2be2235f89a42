"""The cron scheduler: materialises due cron occurrences as runs (docs/architecture.md, "Daemons").

Each tick, for the partitions this scheduler holds, it claims active cron jobs whose
``next_run_at`` falls within ``LOOKAHEAD_S`` of the database clock (FOR UPDATE SKIP
LOCKED, so several schedulers never wait on each other), inserts their runs with
``ON CONFLICT (job_id, scheduled_at) DO NOTHING``, advances ``next_run_at`` with a fenced
UPDATE (``WHERE next_run_at = old``), and pushes the new runs to the broker after commit.
Missed occurrences follow the schedule's misfire policy, never older than its max lag.
"""

import os
import socket
import uuid
from datetime import datetime

from django.db import connections, transaction
from django.db.models import Case, F, When
from django.dispatch import Signal

from jobs.models import Job, MisfirePolicy
from jobs.schedules import cron
from runs import tracing
from runs.alerts.models import AlertKind
from runs.alerts.policy import raise_alerts
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.clock import db_now, seconds
from runs.daemons.daemon import Daemon, transient
from runs.daemons.isolation import one_by_one
from runs.daemons.partitions import PartitionLeases
from runs.execution.transitions import run_refs
from runs.models import Run
from runs.types import RunRef
from scheduler_core import conf

INSERT_CHUNK = 500
UNNEST_CHUNK = 5000

# Sent by a scheduler as it starts, before its first tick, with ``using`` (the database
# alias): what the code declares as recurring (the periodic django.tasks of
# scheduler_tasks) is brought in line with each deploy here, without jobs importing it.
scheduler_starting = Signal()
# Sent at the end of every tick with ``scheduler`` (this Scheduler), ``partitions`` (the
# partition numbers it holds now, of ``total``) and ``using``: apps above jobs do their
# own per-partition work under the same leases (workflows/: cron workflow runs and the
# workflow reconcile), without jobs importing them.
scheduler_tick = Signal()


def plan_occurrences(job: Job, now: datetime, horizon: datetime, limit: int = 1000,
                     grace_s: float | None = None,
                     skipped: list | None = None) -> tuple[list[datetime], datetime]:
    """Which occurrences of cron job ``job`` to materialise now, and its new next_run_at.

    Occurrences run from ``job.next_run_at`` to ``horizon`` (now + lookahead). Those older
    than ``now - MISFIRE_GRACE_S`` are missed: older than ``max_lag_s`` they are dropped
    whatever the policy; otherwise ``run_all`` keeps each, ``run_once`` keeps only the
    latest, or none when an occurrence within the grace is already due (it is the one
    run), ``skip`` keeps none. At most ``limit`` are produced per call; the rest follow
    on the next tick. ``grace_s`` defaults to MISFIRE_GRACE_S; ``skipped``, when given,
    gets the missed occurrences the policy dropped (for the owner's misfire alert,
    docs/alerts.md; those older than max lag are not even enumerated). Returns
    ``(scheduled_at list, next_run_at)``, all aware UTC;
    next_run_at is None when the schedule has no occurrence left before year 9999.
    Occurrences follow jobs.schedules.cron (DST and day rules in docs/cron.md).
    """
    schedule = job.schedule
    oldest = now - seconds(schedule.max_lag_s)
    # Snap to a real occurrence: next_run_at may have been written by hand or under an
    # older expression, and a run must only ever exist at a time the schedule names.
    upcoming = cron.iter_after(schedule.cron, schedule.timezone,
                               max(job.next_run_at, oldest) - seconds(1))
    found, next_run_at = [], None
    for moment in upcoming:
        if moment > horizon or len(found) >= limit:
            next_run_at = moment
            break
        found.append(moment)
    if grace_s is None:
        grace_s = conf.get("MISFIRE_GRACE_S")
    missed_before = now - seconds(grace_s)
    missed = [t for t in found if t < missed_before]
    on_time = [t for t in found if t >= missed_before]
    kept = missed
    if schedule.misfire_policy == MisfirePolicy.RUN_ONCE:
        # One run, not two: an occurrence already due but within the grace stands for
        # the missed ones too (docs/cron.md, "Misfire policies").
        kept = [] if any(t <= now for t in on_time) else missed[-1:]
    elif schedule.misfire_policy == MisfirePolicy.SKIP:
        kept = []
    if skipped is not None:
        skipped += missed[:len(missed) - len(kept)]
    return kept + on_time, next_run_at


def misfire_detail(job: Job, skipped: list[datetime]) -> str:
    """The text of a misfire alert: which occurrences of ``job`` were skipped, and why."""
    shown = ", ".join(t.isoformat() for t in skipped[:5])
    more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return (f"job {job.pk} ({job.name}): {len(skipped)} occurrence(s) missed while no "
            f"scheduler ran were skipped by its misfire policy "
            f"{job.schedule.misfire_policy}: {shown}{more}")


class Scheduler(Daemon):
    """The ``runscheduler`` daemon. ``tick()`` does one pass and is what tests call."""

    name = "scheduler"

    def __init__(self, using: str = "default", scheduler_id: str | None = None,
                 partitions: int | None = None):
        super().__init__(using)
        self.scheduler_id = scheduler_id or f"{socket.gethostname()}:{os.getpid()}:" \
                                            f"{uuid.uuid4().hex[:6]}"
        self.leases = PartitionLeases(
            self.scheduler_id, partitions or conf.get("PARTITIONS"),
            conf.get("PARTITION_TTL_S"), using,
        )
        self.interval_s = conf.get("SCHEDULER_TICK_S")
        self.claimed: list[int] = []  # the cron jobs the last materialize claimed

    def serve(self, max_rounds: int | None = None) -> None:
        scheduler_starting.send(sender=type(self), using=self.using)
        super().serve(max_rounds)

    def round(self) -> bool:
        self.tick()
        return False

    def tick(self) -> int:
        """Refresh partition leases, then materialise every due occurrence in the held
        partitions. Returns the number of runs created."""
        created = 0
        while owned := self.leases.refresh():
            # Leases are refreshed between batches so a long catch-up hands partitions
            # to a scheduler that just started instead of holding them all.
            count, more = self.materialize_isolated(owned)
            created += count
            if not more or self.stopping:
                break
        if self.leases.owned and not self.stopping:
            scheduler_tick.send(sender=type(self), scheduler=self,
                                partitions=list(self.leases.owned), total=self.leases.total,
                                using=self.using)
        return created

    def materialize_isolated(self, partitions: list[int]) -> tuple[int, bool]:
        """``materialize``, with a cron job whose runs cannot be made (a schedule that
        raises at evaluation, values the database refuses) set aside: the batch is
        made again job by job, the job that fails is logged, counted and left out of the
        claims for its backoff (runs/daemons/isolation.py) while the others' runs are made.
        Transient errors, and a failure before any job was claimed, are raised."""
        self.claimed = []
        try:
            return self.materialize(partitions)
        except Exception as exc:
            if transient(exc):
                raise
            made = one_by_one(self.faults, "cron_job", self.claimed, exc,
                              lambda pk: self.materialize(partitions, only=[pk])[0])
            return made, True

    def materialize(self, partitions: list[int],
                    only: list[int] | None = None) -> tuple[int, bool]:
        """One batch: claim up to SCHEDULE_BATCH due cron jobs of ``partitions`` (of the
        ids ``only``, when given; never one backing off after a failure), insert their
        runs and advance them; ``self.claimed`` lists the jobs claimed. Returns ``(runs
        created, more jobs may be due)``."""
        batch = conf.get("SCHEDULE_BATCH")
        total = self.leases.total
        broker = get_broker(self.using)
        with transaction.atomic(using=self.using):
            now = db_now(self.using)
            horizon = now + seconds(conf.get("LOOKAHEAD_S"))
            due = Job.objects.using(self.using).filter(
                status=Job.Status.ACTIVE, schedule__isnull=False, next_run_at__lte=horizon
            )
            if len(partitions) < total:
                due = due.alias(part=F("id") % total).filter(part__in=partitions)
            if only is not None:
                due = due.filter(pk__in=only)
            if held := self.faults.held_back("cron_job"):
                due = due.exclude(pk__in=held)
            jobs = list(
                due.select_related("schedule")
                .defer("payload")  # not needed to plan runs; decoding it costs
                .select_for_update(skip_locked=True, of=("self",))
                .order_by("next_run_at")[:batch]
            )
            self.claimed = [job.pk for job in jobs]
            if not jobs:
                return 0, False
            rows, advances = [], []
            grace_s, shards = conf.get("MISFIRE_GRACE_S"), conf.get("SHARDS")
            misfires = []
            for job in jobs:
                skipped = []
                times, next_run_at = plan_occurrences(job, now, horizon, grace_s=grace_s,
                                                      skipped=skipped)
                if skipped:
                    misfires.append((job.owner_id, job.pk, None, misfire_detail(job, skipped)))
                shard = shard_of(job.shard_source, shards)
                rows += [(job, t, shard) for t in times]
                advances.append((job.pk, job.next_run_at, next_run_at))
            if misfires:
                raise_alerts(AlertKind.MISFIRE, misfires, now, self.using)
            refs = self._insert_runs(rows, now, now - seconds(grace_s))
            self._advance(advances)
            broker.push_after_commit(refs)
        run_ids = [ref.id for ref in refs]
        if run_ids:
            self.log.debug("materialised %d runs for %d jobs", len(run_ids), len(jobs))
        return len(run_ids), len(jobs) == batch

    def _insert_runs(self, rows, now: datetime, missed_before: datetime) -> list[RunRef]:
        """Insert a run per ``(job, scheduled_at, shard)`` row unless it exists; returns
        the new runs. Jitter delays the start, never the occurrence: scheduled_at stays
        the cron time (the run's identity), run_at = scheduled_at + jitter. A run for an
        occurrence older than ``missed_before`` (missed, kept by the misfire policy) is a
        catch-up run (docs/cron.md, "Catch-up runs")."""
        planned = []
        # Each occurrence starts a trace of its own (docs/tracing.md, "Runs made
        # elsewhere"): a job's year of runs in one trace would be no use.
        traced = tracing.on()
        for job, when, shard in rows:
            jitter = cron.jitter_offset(job.pk, job.schedule.jitter_s)
            planned.append((job, when, when + seconds(jitter), shard, jitter,
                            when < missed_before,
                            tracing.enqueued(job.handler, job.pk, own=True) if traced else None))
        connection = connections[self.using]
        if connection.vendor == "postgresql":
            return self._insert_runs_pg(connection, planned, now)
        ops = connection.ops
        table = Run._meta.db_table
        ids: list[int] = []
        columns = ("job_id, scheduled_at, run_at, state, queue, shard, priority, attempt, "
                   "max_attempts, worker_id, created_at, error, jitter_s, catch_up, "
                   "trace_context")
        created = ops.adapt_datetimefield_value(now)
        with connection.cursor() as cursor:
            for start in range(0, len(planned), INSERT_CHUNK):
                chunk = planned[start:start + INSERT_CHUNK]
                params = []
                for job, when, start_at, shard, jitter, catch_up, trace in chunk:
                    params += [job.pk, ops.adapt_datetimefield_value(when),
                               ops.adapt_datetimefield_value(start_at), "scheduled",
                               job.queue, shard, job.priority, 0, job.max_attempts, "",
                               created, "", jitter, catch_up, trace]
                values = ",".join(["(" + ",".join(["%s"] * 15) + ")"] * len(chunk))
                cursor.execute(
                    f"INSERT INTO {table} ({columns}) VALUES {values} "
                    f"ON CONFLICT (job_id, scheduled_at) DO NOTHING RETURNING id",
                    params,
                )
                ids += [r[0] for r in cursor.fetchall()]
        return run_refs(Run.objects.using(self.using).filter(pk__in=ids))

    def _insert_runs_pg(self, connection, planned, now: datetime) -> list[RunRef]:
        # One statement per chunk from arrays (INSERT ... SELECT unnest ... ON CONFLICT,
        # ~170K rows/s: docs/architecture.md, "Measured limits behind the design"),
        # RETURNING what the broker needs, so the new runs are not read back.
        owners = {job.pk: job.owner_id for job, *_ in planned}
        refs: list[RunRef] = []
        with connection.cursor() as cursor:
            for start in range(0, len(planned), UNNEST_CHUNK):
                chunk = planned[start:start + UNNEST_CHUNK]
                columns = list(zip(*[
                    (job.pk, when, start_at, job.queue, shard, job.priority,
                     job.max_attempts, jitter, catch_up, trace)
                    for job, when, start_at, shard, jitter, catch_up, trace in chunk],
                    strict=True))
                cursor.execute(
                    f"INSERT INTO {Run._meta.db_table} (job_id, scheduled_at, run_at, state, "
                    "queue, shard, priority, attempt, max_attempts, worker_id, created_at, "
                    "error, jitter_s, catch_up, trace_context) "
                    "SELECT job_id, scheduled_at, run_at, 'scheduled', queue, shard, "
                    "priority, 0, max_attempts, '', %s, '', jitter_s, catch_up, trace "
                    "FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[], "
                    "%s::text[], %s::int[], %s::int[], %s::int[], %s::float8[], "
                    "%s::boolean[], %s::text[]) "
                    "AS t(job_id, scheduled_at, run_at, queue, shard, priority, "
                    "max_attempts, jitter_s, catch_up, trace) "
                    "ON CONFLICT (job_id, scheduled_at) DO NOTHING "
                    "RETURNING id, job_id, queue, shard, priority, run_at",
                    [now, *(list(column) for column in columns)],
                )
                refs += [RunRef(id=r[0], queue=r[2], shard=r[3], priority=r[4], run_at=r[5],
                                owner=owners[r[1]]) for r in cursor.fetchall()]
        return refs

    def _advance(self, advances) -> None:
        """Set each job's next_run_at, fenced on the value it was claimed with."""
        connection = connections[self.using]
        if connection.vendor == "postgresql":
            # One UPDATE ... FROM unnest per chunk: a CASE with a WHEN per job costs
            # O(jobs) per row and most of the tick's time at 1,000 jobs.
            with connection.cursor() as cursor:
                for start in range(0, len(advances), UNNEST_CHUNK):
                    ids, olds, news = zip(*advances[start:start + UNNEST_CHUNK], strict=True)
                    cursor.execute(
                        f"UPDATE {Job._meta.db_table} AS j SET next_run_at = v.new "
                        "FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) "
                        "AS v(id, old, new) WHERE j.id = v.id AND j.next_run_at = v.old",
                        [list(ids), list(olds), list(news)],
                    )
            return
        jobs = Job.objects.using(self.using)
        for start in range(0, len(advances), INSERT_CHUNK):
            chunk = advances[start:start + INSERT_CHUNK]
            jobs.filter(pk__in=[a[0] for a in chunk]).update(
                next_run_at=Case(
                    *[When(pk=pk, next_run_at=old, then=new) for pk, old, new in chunk],
                    default=F("next_run_at"),
                )
            )

    def shutdown(self) -> None:
        self.leases.release_all()
