"""The transaction of ``services.create_jobs``: schedules, jobs and runs stored for
validated specs, built straight into COPY text lines on PostgreSQL with no model instance
per job (BENCHMARKS.md, "Ingest (W1)"), and the answer,
``CreatedJobs``, which makes a job's instance only when it is asked for.

Each payload is serialised once, by validation (``validate_job``'s ``payload_json``); the
row stores that text. Runs reach the broker after the commit, as everywhere
(docs/architecture.md, "Conventions in the code").
"""

import copy
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.utils import timezone

from jobs import tenants
from jobs.ingest import unique
from jobs.ingest.copy import (
    NULL,
    copy_lines,
    json_text,
    moment,
    next_ids,
    replan_checks,
    text,
)
from jobs.models import Job, Schedule
from jobs.schedules import cron
from jobs.validation import compact_json
from runs import tracing
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.clock import db_now
from runs.flow import control as flow
from runs.models import Run, RunState
from runs.types import RunRef
from scheduler_core import conf

# The columns each table's rows give, in the order of the values below. Every concrete
# field of the model is here (tests/test_api_ingest.py checks), so no column is left to a
# default Django would have filled differently.
SCHEDULE_COLUMNS = ("id", "cron", "timezone", "misfire_policy", "max_lag_s", "jitter_s")
JOB_COLUMNS = ("id", "name", "owner_id", "handler", "payload", "queue", "shard_key",
               "priority", "status", "run_at", "schedule_id", "next_run_at", "timeout_s",
               "max_attempts", "paused_at", "unique_key", "unique_lock", "unique_states",
               "unique_until", "created_at", "updated_at", "retry", "expires_at",
               "expires_in_s", "rate_key", "concurrency_key", "concurrency_limit",
               "on_success", "on_failure", "callback_of", "callback_on")
ACTIVE, SCHEDULED = Job.Status.ACTIVE.value, RunState.SCHEDULED.value
RUN_COLUMNS = ("id", "job_id", "scheduled_at", "run_at", "jitter_s", "state", "queue",
               "shard", "priority", "attempt", "max_attempts", "worker_id",
               "lease_expires_at", "created_at", "started_at", "finished_at", "error",
               "result", "catch_up", "backfill_id", "trace_context")
# From this many new runs per call a stale foreign-key check plan costs more than the one
# round trip that drops it (bulk_insert.replan_checks): a call of 100 runs takes ~10 ms.
REPLAN_FROM_RUNS = 100


def insert(cleaned: list[dict], owner, bounds, using: str) -> "CreatedJobs":
    """Store the jobs of the cleaned specs (jobs/ingest/checking.py, validate_specs' output) in one
    transaction (a savepoint when nested, so a unique key taken meanwhile rolls back only
    this) and return them. Raises tenants.QuotaExceeded; a unique key taken concurrently
    raises IntegrityError (Django's, or psycopg's from COPY), which create_jobs retries."""
    owner_id = owner.pk if owner is not None else None
    broker = get_broker(using)
    # The enqueue span (runs/tracing.py): every run made here stores its traceparent.
    with (tracing.enqueue(cleaned[0]["handler"] if len(cleaned) == 1 else "", len(cleaned)),
          transaction.atomic(using=using)):
        now = db_now(using)
        found = unique.conflicts(cleaned, owner_id, now, using)
        new = [s for i, s in enumerate(cleaned) if i not in found]
        if bounds is not None:
            tenants.check_quotas(bounds, len(new), sum(1 for s in new if not s.get("cron")),
                                 using)
        rows = _Rows(new, owner_id, bounds, now, using)
        rows.store()
        broker.push_after_commit(rows.refs)
    return CreatedJobs(len(cleaned), rows, found, owner, using)


class _Rows:
    """The schedule, job and run values of the new jobs: Python values per job (what the
    answer's instances are made from) and the COPY lines (or model instances off
    PostgreSQL) made from the same values."""

    def __init__(self, new: list[dict], owner_id, bounds, now: datetime, using: str):
        self.new, self.owner_id, self.now, self.using = new, owner_id, now, using
        self.queue = bounds.default_queue if bounds is not None else tenants.SHARED_QUEUE
        self.jobs: list[tuple] = []  # JOB_COLUMNS' values, payload as the Python object
        self.schedules: dict[int, tuple] = {}  # position in new -> SCHEDULE_COLUMNS' values
        self.refs: list[RunRef] = []

    def store(self) -> None:
        postgres = connections[self.using].vendor == "postgresql"
        recurring = [i for i, s in enumerate(self.new) if s.get("cron")]
        schedule_ids = self._ids(Schedule, len(recurring)) if postgres else None
        for n, i in enumerate(recurring):
            s = self.new[i]
            self.schedules[i] = (schedule_ids[n] if postgres else None, s["cron"],
                                 s["timezone"], s["misfire_policy"], s["max_lag_s"],
                                 s.get("jitter_s", 0))
        if postgres:
            copy_lines(Schedule._meta.db_table, SCHEDULE_COLUMNS,
                       [_schedule_line(v) for v in self.schedules.values()], self.using)
        else:
            self._bulk_create(Schedule, SCHEDULE_COLUMNS, self.schedules)
        job_ids = self._ids(Job, len(self.new)) if postgres else [None] * len(self.new)
        lines = self._job_values(job_ids, postgres)
        if postgres:
            copy_lines(Job._meta.db_table, JOB_COLUMNS, lines, self.using)
        else:
            for _ in lines:  # fills self.jobs
                pass
            jobs = dict(enumerate(self.jobs))
            self._bulk_create(Job, JOB_COLUMNS, jobs)
            self.jobs = [jobs[i] for i in range(len(self.jobs))]
        self._runs(postgres)

    def _ids(self, model, count: int) -> list[int]:
        return next_ids(model._meta.db_table, count, self.using) if count else []

    def _job_values(self, ids: list, postgres: bool) -> Iterator[str]:
        """Fill self.jobs as it is consumed, yielding each job's COPY line on PostgreSQL:
        COPY sends each chunk while the next is built, so PostgreSQL inserts rows on one
        core while Python formats the next ones on the other."""
        owner_id, now = self.owner_id, self.now
        stamp = timezone.now()  # auto_now(_add): one time for the whole batch, as before
        default_timeout = conf.get("DEFAULT_TIMEOUT_S")
        default_attempts = conf.get("DEFAULT_MAX_ATTEMPTS")
        next_runs: dict[tuple[str, str], datetime] = {}
        owner_text = NULL if owner_id is None else str(owner_id)
        stamp_text = moment(stamp)
        self.run_at_texts = []
        # Few distinct values per batch: each escaped once.
        handlers, queues = _Escaped(), _Escaped()
        for i, (pk, s) in enumerate(zip(ids, self.new, strict=True)):
            schedule = self.schedules.get(i)
            if schedule is None:
                # One clock for "now" and delays: the database's (docs/api.md).
                run_at = s.get("run_at") or now + timedelta(seconds=s.get("delay_s") or 0)
                next_run_at = None
            else:
                run_at, key = None, (schedule[1], schedule[2])
                if key not in next_runs:
                    next_runs[key] = cron.next_after(key[0], key[1], now)
                next_run_at = next_runs[key]
            priority = s.get("priority")
            values = (
                pk, s["name"], owner_id, s["handler"], s.get("payload", {}),
                s.get("queue") or self.queue, s.get("shard_key") or "",
                5 if priority is None else priority, ACTIVE, run_at,
                None if schedule is None else schedule[0], next_run_at,
                s.get("timeout_s") or default_timeout,
                s.get("max_attempts") or default_attempts, None,
                *unique.columns(s, owner_id, now), stamp, stamp, s.get("retry"),
                s.get("expires_at"), s.get("expires_in_s"), s.get("rate_key") or "",
                s.get("concurrency_key") or "", s.get("concurrency_limit") or 1,
                s.get("on_success"), s.get("on_failure"), None, "")
            self.jobs.append(values)
            if postgres:
                at = moment(run_at)
                if run_at is not None:
                    self.run_at_texts.append(at)
                yield (
                    f"{pk}\t{text(values[1])}\t{owner_text}\t{handlers[values[3]]}\t"
                    f"{json_text(s['payload_json'])}\t{queues[values[5]]}\t"
                    f"{values[6] and text(values[6])}\t{values[7]}\t{ACTIVE}\t{at}\t"
                    f"{NULL if values[10] is None else values[10]}\t{moment(next_run_at)}\t"
                    f"{values[12]}\t{values[13]}\t{NULL}\t{_unique_text(values)}\t"
                    f"{stamp_text}\t{stamp_text}\t{_flow_text(values)}\n")

    def _runs(self, postgres: bool) -> None:
        shards, shard_cache = conf.get("SHARDS"), {}
        one_off = [v for v in self.jobs if v[9] is not None]
        run_ids = self._ids(Run, len(one_off)) if postgres else [None] * len(one_off)
        stamp_text = moment(self.jobs[0][19]) if self.jobs else NULL
        runs: dict[int, tuple] = {}
        queues = _Escaped()
        # The enqueue span's (insert), for every run of the call: hex digits and dashes.
        trace = tracing.current()
        trace_text = NULL if trace is None else trace

        def lines() -> Iterator[str]:  # fills runs as consumed (see _job_values)
            for n, (pk, v) in enumerate(zip(run_ids, one_off, strict=True)):
                source = v[6] or v[3]  # Job.shard_source: the shard key, else the handler
                shard = shard_cache.get(source)
                if shard is None:
                    shard = shard_cache[source] = shard_of(source, shards)
                # (job, scheduled_at, run_at, queue, shard, priority, max_attempts, trace)
                runs[n] = (pk, v[0], v[9], v[9], v[5], shard, v[7], v[13], trace)
                if postgres:
                    at = self.run_at_texts[n]
                    yield (f"{pk}\t{v[0]}\t{at}\t{at}\t0\t{SCHEDULED}\t"
                           f"{queues[v[5]]}\t{shard}\t{v[7]}\t0\t{v[13]}\t\t{NULL}\t"
                           f"{stamp_text}\t{NULL}\t{NULL}\t\t{NULL}\tf\t{NULL}\t{trace_text}\n")

        if postgres:
            copy_lines(Run._meta.db_table, RUN_COLUMNS, lines(), self.using)
            if len(one_off) >= REPLAN_FROM_RUNS:
                replan_checks(self.using)
        else:
            for _ in lines():
                pass
            self._bulk_create(Run, ("id", "job_id", "scheduled_at", "run_at", "queue",
                                    "shard", "priority", "max_attempts", "trace_context"),
                              runs)
        # Gates only while flow control is in use: each costs Redis a hash write at push
        # and a read at lease (W1 lost 6-13% to them, BENCHMARKS.md); a limit set later
        # pushes the waiting runs again with theirs (runs/flow/rate_limits.py, _spread).
        gated = flow.in_use(self.using)
        self.refs = [RunRef(r[0], r[4], r[5], r[6], r[3], self.owner_id,
                            flow.gate(v[3], v[24], v[25], v[26], self.owner_id)
                            if gated else None)
                     for r, v in zip(runs.values(), one_off, strict=True)]

    def _bulk_create(self, model, columns: tuple[str, ...], rows: dict[int, tuple]) -> None:
        """Off PostgreSQL (SQLite): bulk_create instances of ``rows`` (their ids None),
        then read the values back from them (the ids, and the timestamps bulk_create
        stamps)."""
        objs = [model(**dict(zip(columns[1:], values[1:], strict=True)))
                for values in rows.values()]
        model.objects.using(self.using).bulk_create(objs, batch_size=2000)
        for key, obj in zip(list(rows), objs, strict=True):
            rows[key] = tuple(getattr(obj, column) for column in columns)


def _schedule_line(v: tuple) -> str:
    return f"{v[0]}\t{text(v[1])}\t{text(v[2])}\t{text(v[3])}\t{v[4]}\t{v[5]}\n"


def _flow_text(v: tuple) -> str:
    """retry, expires_at, expires_in_s, rate_key, concurrency_key, concurrency_limit,
    on_success, on_failure, callback_of and callback_on of job values ``v`` as COPY
    fields (a job made here is no callback: jobs/callbacks.py makes those)."""
    return (f"{NULL if v[21] is None else json_text(compact_json(v[21]))}\t"
            f"{moment(v[22])}\t{NULL if v[23] is None else v[23]}\t"
            f"{v[24] and text(v[24])}\t{v[25] and text(v[25])}\t{v[26]}\t"
            f"{NULL if v[27] is None else json_text(compact_json(v[27]))}\t"
            f"{NULL if v[28] is None else json_text(compact_json(v[28]))}\t{NULL}\t")


def _unique_text(v: tuple) -> str:
    """unique_key, unique_lock, unique_states and unique_until of job values ``v``."""
    if not v[15]:
        return f"\t{NULL}\t\t{NULL}"
    return f"{text(v[15])}\t{text(v[16])}\t{v[17]}\t{moment(v[18])}"


class _Escaped(dict):
    """text() of each value asked for, computed once."""

    def __missing__(self, value: str) -> str:
        self[value] = text(value)
        return self[value]


class CreatedJobs(Sequence):
    """create_jobs' answer: one job per spec, in order, each the new job or, for a spec
    whose unique key was held, the holder with ``conflict`` True (jobs/ingest/unique.py). ``ids``
    and ``conflicts`` (the indexes answered by a holder) cost nothing; a Job instance
    (saved on ``using``, its owner and schedule cached, ``conflict`` set) is made the first
    time its index is read, and the same one is returned afterwards."""

    def __init__(self, count: int, rows: _Rows, found: dict, owner, using: str):
        self._rows, self._found, self._owner, self._using = rows, found, owner, using
        self._made: dict[int, Job] = {}
        fresh = iter(range(len(rows.jobs)))
        self._new_at = {i: next(fresh) for i in range(count) if i not in found}
        self.conflicts: list[int] = sorted(found)
        self.ids: list[int] = [self._id(i) for i in range(count)]

    def _id(self, i: int) -> int:
        holder = self._found.get(i)
        if holder is None:
            return self._rows.jobs[self._new_at[i]][0]
        return self._id(holder) if isinstance(holder, int) else holder.pk

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("CreatedJobs index out of range")
        if index not in self._made:
            self._made[index] = self._make(index)
        return self._made[index]

    # Callers may treat it as the list it used to be: ``jobs + more``, ``jobs == [...]``.
    def __add__(self, other) -> list:
        return [*self, *other]

    def __radd__(self, other) -> list:
        return [*other, *self]

    def __eq__(self, other) -> bool:
        if isinstance(other, list | CreatedJobs):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # mutable-looking, like a list

    def __repr__(self) -> str:
        return f"<CreatedJobs ids={self.ids!r} conflicts={self.conflicts!r}>"

    def _make(self, index: int) -> Job:
        holder = self._found.get(index)
        if holder is not None:
            job = copy.copy(self[holder] if isinstance(holder, int) else holder)
            job.conflict = True
            return job
        position = self._new_at[index]
        values = self._rows.jobs[position]
        job = Job(**dict(zip(JOB_COLUMNS, values, strict=True)))
        job._state.adding, job._state.db = False, self._using
        job.conflict = False
        Job.owner.field.set_cached_value(job, self._owner)
        schedule = self._rows.schedules.get(position)
        if schedule is not None:
            schedule = Schedule(**dict(zip(SCHEDULE_COLUMNS, schedule, strict=True)))
            schedule._state.adding, schedule._state.db = False, self._using
        Job.schedule.field.set_cached_value(job, schedule)
        return job
