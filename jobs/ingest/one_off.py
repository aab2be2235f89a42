"""One one-off job and its run in a single statement: the path of ``create_job`` (a
django.tasks ``enqueue()``, a REST or Python create of one job) on PostgreSQL when there
is nothing else to check in the transaction (no cron, no unique key, no owner quota to
count). The bulk path (jobs/ingest/bulk.py: the database clock read, then ids and a COPY per
table) takes seven round trips and a commit for one job; this is one statement that reads
the database clock itself, and outside a transaction that statement is its own commit
(BENCHMARKS.md, "django.tasks").
"""

import re

from django.db import connections, transaction
from django.db.models import DateField, DateTimeField, Field
from psycopg.types.json import Jsonb

from jobs.models import Job
from runs import tracing
from runs.brokers import get_broker, pg_listen
from runs.brokers.shards import shard_of
from runs.flow import control as flow
from runs.models import Run, RunState
from runs.tenancy.quotas import SHARED_QUEUE, Bounds
from runs.types import RunRef
from scheduler_core import conf, prepared


def applies(cleaned: list[dict], bounds: Bounds | None, using: str) -> bool:
    """Whether validated ``cleaned`` may take create_one: one one-off job without a unique
    key, on PostgreSQL, for no owner or one without a jobs or pending quota (those counts
    need the bulk create's transaction and lock: runs/tenancy/quotas.py)."""
    if len(cleaned) != 1 or connections[using].vendor != "postgresql":
        return False
    spec = cleaned[0]
    return not (spec.get("cron") or spec.get("unique_key")) and (
        bounds is None or not (bounds.max_jobs or bounds.max_pending))


def create_one(spec: dict, owner, bounds: Bounds | None, using: str) -> Job:
    """Store the one-off job of validated ``spec`` and its run, and push the run to the
    broker after commit (at once outside a transaction); returns the saved Job, its run
    as ``created_run``. Inside a transaction the statement takes no savepoint: a database
    error leaves the caller's transaction to roll back, as after a failed Model.save()."""
    job = new(Job, {
        "name": spec["name"], "owner_id": owner.pk if owner is not None else None,
        "handler": spec["handler"], "payload": spec.get("payload", {}),
        "queue": spec.get("queue") or (bounds.default_queue if bounds else SHARED_QUEUE),
        "shard_key": spec.get("shard_key") or "", "priority": spec.get("priority", 5),
        "run_at": spec.get("run_at"),
        "timeout_s": spec.get("timeout_s") or conf.get("DEFAULT_TIMEOUT_S"),
        "max_attempts": spec.get("max_attempts") or conf.get("DEFAULT_MAX_ATTEMPTS"),
        "retry": spec.get("retry"), "expires_at": spec.get("expires_at"),
        "expires_in_s": spec.get("expires_in_s"), "rate_key": spec.get("rate_key") or "",
        "concurrency_key": spec.get("concurrency_key") or "",
        "concurrency_limit": spec.get("concurrency_limit") or 1,
        "on_success": spec.get("on_success"), "on_failure": spec.get("on_failure"),
    })
    job.conflict = False
    Job.owner.field.set_cached_value(job, owner)
    Job.schedule.field.set_cached_value(job, None)
    run = new(Run, {"queue": job.queue, "shard": shard_of(job.shard_source, conf.get("SHARDS")),
                    "priority": job.priority, "max_attempts": job.max_attempts})
    # No run_at: now, or delay_s from now, on the database's clock (docs/api.md).
    delay_s = None if spec.get("run_at") else (spec.get("delay_s") or 0)
    broker = get_broker(using)
    # One statement is atomic by itself: no savepoint and its release around it.
    # The enqueue span (runs/tracing.py), whose traceparent the run stores.
    with tracing.enqueue(job.handler), transaction.mark_for_rollback_on_error(using=using):
        run.trace_context = tracing.current()
        # Where the runs table is the working set, a due run is stored ready and a later
        # one waits for the dispatcher's promote: nothing to push (runs/brokers/database.py).
        insert_job_with_run(job, run, using, delay_s, ready_if_due=broker.ready_when_stored,
                            payload_json=spec.get("payload_json"))
    if not broker.ready_when_stored:
        broker.push_after_commit([RunRef(
            run.pk, run.queue, run.shard, run.priority, run.run_at, job.owner_id,
            # Gated only while flow control is in use (jobs/ingest/bulk.py says why).
            flow.gate(job.handler, job.rate_key, job.concurrency_key, job.concurrency_limit,
                      job.owner_id)
            if flow.in_use(using) else None)])
    job.created_run = run
    return job


# Where a statement's value comes from besides its field: the job's run_at given as a delay
# on the database clock.
DELAY = "delay"
# (alias, delayed, ready_if_due) -> (sql, its parameters' sources): the text
# is the same for every call, and building it cost about a sixth of an enqueue's CPU.
_STATEMENTS: dict[tuple[str, bool, bool], tuple[str, list]] = {}
JOB, RUN = "job", "run"
PAYLOAD = Job._meta.get_field("payload")
# model -> (attname, its field's get_default) of each concrete field, in order: new's plan.
_FIELDS: dict[type, list] = {}
# The values whose prepared form is kept per statement and parameter (_prepared): plain
# and immutable; most of a job's fields hold one of a few such values.
PLAIN = frozenset({type(None), bool, int, float, str})
# Most prepared values kept per parameter: a field such as the job's name may take any.
PREPARED_MAX = 64


def new(model: type, values: dict):
    """An unsaved ``model`` instance with ``values`` (by attname), each other field at its
    default: ``model(**values)``, made positionally. Django's keyword path looks every
    field up by name, its descriptor too, which cost a Job and its Run 80 µs of an
    enqueue's CPU (docs/performance.md, "The cost of an enqueue")."""
    fields = _FIELDS.get(model)
    if fields is None:
        fields = _FIELDS[model] = [(f.attname, f.get_default)
                                   for f in model._meta.concrete_fields]
    return model(*[values[name] if name in values else default()
                   for name, default in fields])


def insert_job_with_run(job: Job, run: Run, using: str = "default",
                        delay_s: float | None = None, ready_if_due: bool = False,
                        payload_json: str | None = None) -> None:
    """Insert unsaved ``job`` and its unsaved ``run`` in one statement on PostgreSQL: a
    data-modifying WITH, the job's INSERT, then the run's given the job's id. With
    ``delay_s`` (seconds) the job's run_at is the database clock plus that, read in the
    statement (docs/architecture.md, "One clock"); otherwise ``job.run_at`` (aware). With
    ``ready_if_due`` a run due when the statement runs is stored ``queued`` (the database
    broker's ready set) and its queue notified. ``payload_json`` is the job's payload
    as JSON text when validation made it (jobs/validation.py, payload_json): sent as it
    is, not serialised again. Sets both primary keys, ``run.job_id``,
    both rows' run_at (the run's scheduled_at too) and the run's state, and marks both
    saved on ``using``."""
    connection = connections[using]
    key = (using, delay_s is not None, ready_if_due)
    if key not in _STATEMENTS:
        sql, job_sources, run_sources = _statement(connection, *key[1:])
        # Each parameter with the row it comes from, its prepared values kept, and its
        # attname where the value is the instance's own (see _plain_read).
        _STATEMENTS[key] = (sql, [(JOB, source, {}, _plain_read(source))
                                  for source in job_sources]
                            + [(RUN, source, {}, _plain_read(source))
                               for source in run_sources])
    sql, sources = _STATEMENTS[key]
    values = {JOB: job.__dict__, RUN: run.__dict__}
    # Django's own preparation, auto_now(_add) stamps included (pre_save sets them).
    params = [float(delay_s) if field is DELAY
              else Jsonb(job.payload, dumps=lambda _: payload_json)
              if field is PAYLOAD and payload_json is not None
              else _prepared(field, values[owner][attname] if attname else
                             field.pre_save(job if owner is JOB else run, True),
                             connection, kept)
              for owner, field, kept, attname in sources]
    with prepared.cursor(connection) as cursor:
        cursor.execute(sql, params)
        run.pk, job.pk, job.run_at, run.state = cursor.fetchone()[:4]
    run.job_id, run.scheduled_at, run.run_at = job.pk, job.run_at, job.run_at
    for obj in (job, run):
        obj._state.adding, obj._state.db = False, using


def _plain_read(source) -> str | None:
    """The attname ``source`` (a model field, or DELAY) is read by, where its
    ``pre_save`` returns the instance's value of it (Field's own, or a date field's
    without auto_now or auto_now_add); None where it stamps or computes one: that is
    called. Each call of the chain cost an enqueue about a microsecond a parameter."""
    if source is DELAY:
        return None
    if isinstance(source, DateField):
        stamps = source.auto_now or source.auto_now_add
        return None if stamps or type(source).pre_save not in _DATE_PRE_SAVES else (
            source.attname)
    return source.attname if type(source).pre_save is Field.pre_save else None


_DATE_PRE_SAVES = (DateField.pre_save, DateTimeField.pre_save)


def _prepared(field, value, connection, kept: dict):
    """``field.get_db_prep_save(value, connection)``, kept in ``kept`` for a PLAIN
    ``value``: the same value always prepares alike, and preparing each of the two rows'
    47 parameters through Django's chain of calls cost an enqueue 60 µs of CPU."""
    kind = type(value)
    if kind not in PLAIN:
        return field.get_db_prep_save(value, connection)
    try:
        return kept[kind, value]
    except KeyError:
        db_value = field.get_db_prep_save(value, connection)
        if len(kept) < PREPARED_MAX:
            kept[kind, value] = db_value
        return db_value


def _statement(connection, delayed: bool, ready_if_due: bool) -> tuple[str, list, list]:
    """insert_job_with_run's SQL on ``connection`` and, in parameter order, where each
    parameter comes from: a model field or DELAY. The constants (the ready state, the
    channel) are literals, not parameters: psycopg caches the parsing of a statement of
    at most 50 parameters only (psycopg/_queries.py, MAX_CACHED_STATEMENT_PARAMS), and
    re-parsing this one cost a database-broker enqueue about a fifth of its CPU."""
    quote = connection.ops.quote_name
    columns, values, job_sources = [], [], []
    for field in Job._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(quote(field.column))
        if field.attname == "run_at" and delayed:
            values.append("clock_timestamp() + make_interval(secs => %s)")
            job_sources.append(DELAY)
        else:
            values.append("%s")
            job_sources.append(field)
    job_sql = (f"INSERT INTO {quote(Job._meta.db_table)} ({', '.join(columns)}) "
               f"VALUES ({', '.join(values)}) RETURNING id, run_at")
    columns, values, run_sources = [], [], []
    for field in Run._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(quote(field.column))
        if field.attname == "job_id":
            values.append("(SELECT id FROM j)")
        elif field.attname in ("scheduled_at", "run_at"):
            values.append("(SELECT run_at FROM j)")
        elif field.attname == "state" and ready_if_due:
            values.append("CASE WHEN (SELECT run_at FROM j) <= clock_timestamp() "
                          f"THEN {_literal(RunState.QUEUED)} ELSE %s END")
            run_sources.append(field)
        else:
            values.append("%s")
            run_sources.append(field)
    run_sql = (f"INSERT INTO {quote(Run._meta.db_table)} "
               f"({', '.join(columns)}) VALUES ({', '.join(values)}) "
               f"RETURNING id, job_id, run_at, state{', queue' if ready_if_due else ''}")
    if ready_if_due:
        # A run stored ready wakes the idle workers of its queue at the commit, in the
        # same statement (runs/brokers/pg_listen.py); the void column is not read.
        sql = (f"WITH j AS ({job_sql}), r AS ({run_sql}) SELECT id, job_id, run_at, state, "
               f"CASE WHEN state = {_literal(RunState.QUEUED)} "
               f"THEN pg_notify({_literal(pg_listen.CHANNEL)}, queue) END FROM r")
    else:
        sql = f"WITH j AS ({job_sql}) {run_sql}"
    return sql, job_sources, run_sources


def _literal(text: str) -> str:
    """``text`` (one of this module's constants: lower-case letters and underscores) as
    an SQL string literal; raises ValueError for anything else, which would need quoting."""
    if not re.fullmatch(r"[a-z_]+", text):
        raise ValueError(f"not a plain constant: {text!r}")
    return f"'{text}'"
