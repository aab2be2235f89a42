"""The run history in time partitions on PostgreSQL (docs/retention.md, "Partitioned
history"): runs, attempts and log lines are range-partitioned tables of equal bounds,
HISTORY_PARTITION_S wide, each with a DEFAULT partition. A run lies in the partition of
its ``scheduled_at``; its attempts and log lines carry that instant (``run_scheduled_at``,
copied: a run's scheduled_at never changes) and so lie in partitions of the same bounds.

The dispatcher keeps HISTORY_PARTITIONS_AHEAD partitions created ahead of now
(create_ahead) and retires whole partitions once the retention has passed their upper
bound (drop_expired): detach, copy back the runs that must stay, drop. The row-by-row
prune (runs/history/retention.py) is left the few runs no partition drop will reach soon
(row_scopes). SQLite keeps plain tables; every function here is then a no-op.

These are time partitions of the history, not the scheduler's job-id partitions
(runs/daemons/partitions.py).
"""

import itertools
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connections, transaction
from django.db.models import F, Q

from runs.clock import EPOCH
from runs.execution import hooks
from runs.models import RunState
from scheduler_core import conf

log = logging.getLogger("scheduler.retention")

# (table, partition key), parents first: the order locks are taken in.
TABLES = (("runs_run", "scheduled_at"), ("runs_attempt", "run_scheduled_at"),
          ("runs_logline", "run_scheduled_at"))
# pg_advisory_xact_lock key of every partition change: dispatchers take turns.
LOCK_KEY = 0x5C4ED_0019
# The lease (runs/history/named_leases.py) of finishing detached partitions
# (retention.finish_detached): one process at a time drops them and cleans their jobs. A
# row, not a session-level advisory lock, which PgBouncer's transaction pooling would
# leave held on another session.
FINISH_LEASE = "history_partitions.finish"
# Renewed before every step (one partition's count and job deletes, the drop); a holder
# that dies blocks the finishing this long at most.
FINISH_LEASE_S = 600.0
# Detaching locks the three tables outright; a dispatcher that cannot have them within
# this wait gives up until its next prune round instead of stalling every worker's ack
# behind its queued lock request.
LOCK_TIMEOUT = "2s"
PRUNABLE = ("succeeded", "cancelled")


@dataclass(frozen=True)
class Range:
    """One range partition of runs_run: [lower, upper) in UTC, and its name's suffix."""

    lower: datetime
    upper: datetime

    @property
    def suffix(self) -> str:
        return f"p{self.lower:%Y%m%d_%H%M}"


def partitioned(using: str = "default") -> bool:
    """Whether ``using`` holds the partitioned layout (PostgreSQL after migration
    runs 0010); False on SQLite."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = 'runs_run'::regclass")
        row = cursor.fetchone()
    return bool(row and row[0])


def ranges(cursor, table: str = "runs_run") -> list[Range]:
    """The range partitions attached to ``table``, oldest first (the DEFAULT left out)."""
    cursor.execute(
        "SELECT (regexp_match(b, $$FROM \\('([^']+)'\\)$$))[1]::timestamptz, "
        "(regexp_match(b, $$TO \\('([^']+)'\\)$$))[1]::timestamptz "
        "FROM (SELECT pg_get_expr(c.relpartbound, c.oid) AS b FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass) p "
        "WHERE b <> 'DEFAULT' ORDER BY 1", [table])
    return [Range(lower.astimezone(UTC), upper.astimezone(UTC))
            for lower, upper in cursor.fetchall()]


def floor_to_width(moment: datetime, width_s: int) -> datetime:
    """The partition boundary at or before ``moment``: a multiple of ``width_s`` seconds
    since the Unix epoch (UTC midnights for the daily default)."""
    elapsed = int((moment - EPOCH).total_seconds())
    return EPOCH + timedelta(seconds=elapsed - elapsed % width_s)


MIN_WIDTH_S = 60


def width_s() -> int:
    """HISTORY_PARTITION_S, checked: a partition at least a minute wide. 0 only tells the
    migration to keep plain tables; a database partitioned already takes a day."""
    width = conf.get("HISTORY_PARTITION_S") or 86_400
    if width < MIN_WIDTH_S:  # refused at start too (runs/checks.py, scheduler.E011)
        raise ValueError(f"HISTORY_PARTITION_S must be at least {MIN_WIDTH_S} seconds, "
                         f"not {width}")
    return width


def _literal(moment: datetime) -> str:
    # DDL takes no bind parameters; the instant is one we computed, never user input.
    return "'" + moment.astimezone(UTC).isoformat() + "'"


def create_range(cursor, bounds: Range) -> None:
    """Create the partition ``bounds`` of each history table. Rows the DEFAULT partition
    already holds in that range (runs scheduled beyond the partitions ahead) are moved
    into it first, under an exclusive lock of the three tables, so the attach never
    fails on them and no statement sees the rows missing. Call in a transaction."""
    moving = False
    for table, key in TABLES:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table}_default WHERE {key} >= %s "
                       f"AND {key} < %s)", [bounds.lower, bounds.upper])
        moving = moving or cursor.fetchone()[0]
    lower, upper = _literal(bounds.lower), _literal(bounds.upper)
    if moving:
        lock_tables(cursor)
    for table, key in TABLES:
        name = f"{table}_{bounds.suffix}"
        if not moving:
            cursor.execute(f"CREATE TABLE {name} PARTITION OF {table} "
                           f"FOR VALUES FROM ({lower}) TO ({upper})")
            continue
        cursor.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS "
                       "INCLUDING CONSTRAINTS)")
        cursor.execute(f"WITH moved AS (DELETE FROM {table}_default WHERE {key} >= %s "
                       f"AND {key} < %s RETURNING *) INSERT INTO {name} SELECT * FROM moved",
                       [bounds.lower, bounds.upper])
        cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} "
                       f"FOR VALUES FROM ({lower}) TO ({upper})")


def lock_tables(cursor) -> None:
    """Lock the three history tables ACCESS EXCLUSIVE (parents first), waiting at most
    LOCK_TIMEOUT; raises django.db.OperationalError when the wait runs out."""
    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    cursor.execute("LOCK TABLE " + ", ".join(table for table, _ in TABLES)
                   + " IN ACCESS EXCLUSIVE MODE")


def create_ahead(using: str = "default", now: datetime | None = None) -> int:
    """Make sure partitions cover from the newest one (or the start of the current one)
    to HISTORY_PARTITIONS_AHEAD widths past ``now`` (database clock by default); returns
    how many ranges were created. Cheap when nothing is missing (one catalog query, no
    lock); otherwise one transaction under the advisory lock LOCK_KEY, so two
    dispatchers never race (the second finds the work done)."""
    if not partitioned(using):
        return 0
    width = width_s()
    connection = connections[using]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if now is None:
            cursor.execute("SELECT clock_timestamp()")
            now = cursor.fetchone()[0]
        horizon = now + timedelta(seconds=width * conf.get("HISTORY_PARTITIONS_AHEAD"))
        present = ranges(cursor)
        if present and present[-1].upper > horizon:
            return 0
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        present = ranges(cursor)
        start = present[-1].upper if present else floor_to_width(now, width)
        created = 0
        while start <= horizon:
            create_range(cursor, Range(start, start + timedelta(seconds=width)))
            start += timedelta(seconds=width)
            created += 1
    if created:
        log.info("history: created %d time partitions ahead, up to %s", created,
                 f"{start:%Y-%m-%d %H:%M} UTC")
    return created


def keeper(before: datetime, table: str = "") -> tuple[str, list]:
    """SQL condition (and parameters) of the runs retention keeps at cutoff ``before``,
    the negation of retention.prunable: not succeeded or cancelled, or not finished
    before the cutoff (docs/retention.md, "What stays"). Spelt with the other states
    listed, not NOT IN, so the run_state_finished index (state, finished_at) finds the
    few keepers of a partition instead of a scan of all its runs."""
    prefix = f"{table}." if table else ""
    others = [state for state in RunState.values if state not in PRUNABLE]
    listed = ", ".join(["%s"] * len(others))
    return (f"({prefix}state IN ({listed}) OR ({prefix}state IN (%s, %s) AND "
            f"({prefix}finished_at IS NULL OR {prefix}finished_at >= %s)))",
            [*others, *PRUNABLE, before])


def expired(cursor, before: datetime) -> list[Range]:
    """The range partitions of runs_run wholly before ``before``, oldest first."""
    return [r for r in ranges(cursor) if r.upper <= before]


def detach_expired(using: str, before: datetime) -> list[tuple[Range, int]]:
    """Detach every partition wholly older than ``before`` from the three tables and copy
    the runs retention keeps (with their attempts and log lines) back into the parents,
    where they land in the DEFAULT partition: one transaction per partition, oldest
    first, each under LOCK_KEY and, for its detach and copy-back only, the three tables'
    exclusive locks (the rows it copies back are read before the locks: _warm). Returns
    each range detached with the runs kept from it. The detached tables are left for
    retention.finish_detached. Stops (returning what it did) when another dispatcher holds
    LOCK_KEY. Raises django.db.OperationalError when the tables stay locked past
    LOCK_TIMEOUT (the partitions detached before it stay detached)."""
    with connections[using].cursor() as cursor:
        due = expired(cursor, before)
    done = []
    for bounds in due:
        kept = _detach_one(using, before, bounds)
        if kept is None:
            break
        done.append((bounds, kept))
    return done


def _detach_one(using: str, before: datetime, bounds: Range) -> int | None:
    """detach_expired's transaction for partition ``bounds``; returns the runs copied
    back, None when another session holds LOCK_KEY. A partition another dispatcher
    detached meanwhile counts as done (0 kept)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        if bounds not in expired(cursor, before):
            return 0
        # The copy-back's statements cost the planner over jit_above_cost at 10 M rows,
        # and compiling them (9-15 functions each) took longer than running them, all
        # under the locks (BENCHMARKS.md, "Cron, isolation, history").
        cursor.execute("SET LOCAL jit = off")
        # The commit need not wait for its WAL flush while holding the locks: a crash
        # that loses it loses the detach whole (the partition attached again, the copies
        # gone with it), which the next pass redoes; the DROP after it flushes it first.
        cursor.execute("SET LOCAL synchronous_commit = off")
        run, attempt, line = (f"{table}_{bounds.suffix}" for table, _ in TABLES)
        kept, params = keeper(before, run)
        _warm(cursor, bounds.suffix, kept, params)
        lock_tables(cursor)
        for table, _ in TABLES:
            cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {table}_{bounds.suffix}")
        # A detached partition keeps the foreign key to jobs as its own: without it,
        # the one-off jobs it leaves with no run can go before it is dropped.
        cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass "
                       "AND contype = 'f'", [run])
        for (name,) in cursor.fetchall():
            cursor.execute(f"ALTER TABLE {run} DROP CONSTRAINT {name}")
        # One statement, so the keepers and their attempts are each found once.
        cursor.execute(
            f"WITH r AS (INSERT INTO runs_run SELECT * FROM {run} WHERE {kept} "
            f"RETURNING id), a AS (INSERT INTO runs_attempt SELECT a.* FROM {attempt} a "
            f"WHERE a.run_id IN (SELECT id FROM r) RETURNING id), l AS (INSERT INTO "
            f"runs_logline SELECT l.* FROM {line} l WHERE l.attempt_id IN (SELECT id FROM a) "
            f"RETURNING 1) SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM l)", params)
        copied = cursor.fetchone()[0]
        _copy_back_hook_keepers(cursor, bounds.suffix, kept, params)
    return copied


def _warm(cursor, suffix: str, kept: str, params: list) -> None:
    """Read, before the locks are taken, every row detach_expired will copy back from
    partition ``suffix`` (``kept``: keeper's condition on its runs), so the locked
    copy-back finds them in memory: at 10 M runs a partition's 10,000 keepers' attempts
    and log lines are as many random reads of files mostly out of the page cache, and the
    acks wait on the locks meanwhile. Whole rows (``w.*``), so no index-only scan
    skips the heap. Only a hint: rows that change in between are read again under the
    locks, and the copy-back decides what is kept."""
    run, attempt, line = (f"{table}_{suffix}" for table, _ in TABLES)
    keepers = f"SELECT {run}.id FROM {run} WHERE {kept}"
    cursor.execute(
        f"SELECT (SELECT count(w.*) FROM (SELECT * FROM {run} WHERE {kept}) w), "
        f"(SELECT count(w.*) FROM (SELECT a.* FROM {attempt} a WHERE a.run_id IN "
        f"({keepers})) w), (SELECT count(w.*) FROM (SELECT l.* FROM {line} l WHERE "
        f"l.attempt_id IN (SELECT a.id FROM {attempt} a WHERE a.run_id IN ({keepers}))) w)",
        params * 3)
    cursor.fetchone()


def _copy_back_hook_keepers(cursor, suffix: str, kept: str, params: list) -> None:
    """Copy back from the detached partition ``suffix`` the runs a run keeper keeps
    (runs/execution/hooks.py's keep_runs) that ``kept`` (keeper's condition) did not, with their
    attempts and log lines. The keepers' SELECT drives it (few ids, each found by the
    partition's primary key), so the partition is not scanned under the locks."""
    run, attempt, line = (f"{table}_{suffix}" for table, _ in TABLES)
    extra = hooks.kept_runs_sql(f"(SELECT id, state FROM runs_run UNION ALL "
                                f"SELECT id, state FROM {run})")
    if extra is None:
        return
    ids = f"SELECT {run}.id FROM {run} WHERE {run}.id IN ({extra}) AND NOT {kept}"
    cursor.execute(f"INSERT INTO runs_run SELECT * FROM {run} WHERE {run}.id IN ({ids})",
                   params)
    cursor.execute(f"INSERT INTO runs_attempt SELECT a.* FROM {attempt} a "
                   f"WHERE a.run_id IN ({ids})", params)
    cursor.execute(f"INSERT INTO runs_logline SELECT l.* FROM {line} l WHERE l.attempt_id "
                   f"IN (SELECT a.id FROM {attempt} a WHERE a.run_id IN ({ids}))", params)


def estimate(cursor, table: str) -> int:
    """The planner's row count of ``table`` (pg_class.reltuples; 0 if never analysed)."""
    cursor.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = "
                   "%s::regclass", [table])
    return cursor.fetchone()[0]


def detached(cursor) -> list[str]:
    """Suffixes of history partitions detached and not yet dropped (a crash between
    detach_expired and retention.finish_detached leaves some), oldest first."""
    cursor.execute("SELECT substr(relname, length('runs_run_') + 1) FROM pg_class "
                   "WHERE relkind = 'r' AND NOT relispartition "
                   "AND relname ~ '^runs_run_p[0-9]{8}_[0-9]{4}$' ORDER BY relname")
    return [row[0] for row in cursor.fetchall()]


def row_scopes(using: str) -> list[Q]:
    """What the dispatcher's row-by-row prune looks at on a partitioned database: runs
    that finished before they were due (cancelled ahead of time: their partition expires
    late; the run_finished_early index finds them), and the DEFAULT partition (runs kept
    from dropped partitions, runs beyond the partitions ahead). The rest waits for its
    partition's drop. On plain tables: everything (one scope matching all)."""
    if not partitioned(using):
        return [Q()]
    with connections[using].cursor() as cursor:
        present = ranges(cursor)
    if not present:  # everything is in the DEFAULT partition
        return [Q()]
    outside = Q(scheduled_at__lt=present[0].lower) | Q(scheduled_at__gte=present[-1].upper)
    for older, newer in itertools.pairwise(present):  # gaps: none unless made by hand
        if older.upper < newer.lower:
            outside |= Q(scheduled_at__gte=older.upper, scheduled_at__lt=newer.lower)
    return [Q(finished_at__lt=F("scheduled_at")), outside]
