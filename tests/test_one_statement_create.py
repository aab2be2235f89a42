"""A create of one one-off job (jobs/ingest/one_off.py): on PostgreSQL one statement stores the
job and its run, outside a transaction its own commit; on the database broker a due run
is stored ready, with nothing to push (BENCHMARKS.md, "django.tasks"). On every
broker/database pair."""

import os

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from jobs import services
from jobs.models import Job
from runs.flow import control as flow
from runs.models import Run, RunState
from scheduler_project.settings import PREPARE_THRESHOLD
from tests import djtasks_tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def pair(broker, settings, monkeypatch):
    """``broker``'s pair made the one the Python API and the django.tasks backend use.

    Whether flow control is in use is read at most once per CACHE_S per process, not per
    create: it is read here, and held for the test, so that a loaded machine's slow test
    never counts those reads as the create's."""
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "QUEUES": [], "OPTIONS": {"DATABASE": broker.using}}}
    monkeypatch.setattr(flow, "CACHE_S", 3600.0)
    flow.in_use(broker.using)
    return broker


def waiting(broker) -> int:
    broker._known_at = float("-inf")  # the Redis broker caches the shards it has seen
    return sum(d.ready + d.delayed for d in broker.depth())


def on_postgresql(broker) -> bool:
    return connections[broker.using].vendor == "postgresql"


def test_one_create_stores_the_job_and_its_run_and_returns_the_run(pair):
    if not on_postgresql(pair):
        pytest.skip("SQLite takes the bulk path (jobs/ingest/bulk.py)")
    job = services.create_job("noop", {"i": 1}, using=pair.using, delay_s=0)

    run = Run.objects.using(pair.using).get(job_id=job.pk)
    assert job.created_run.pk == run.pk
    assert job.created_run.created_at == run.created_at
    assert run.scheduled_at == run.run_at == job.run_at
    assert Job.objects.using(pair.using).get(pk=job.pk).run_at == job.run_at
    assert waiting(pair) == 1


def test_on_postgresql_one_create_outside_a_transaction_is_one_statement(pair):
    if not on_postgresql(pair):
        pytest.skip("SQLite takes the bulk path (jobs/ingest/bulk.py)")
    with CaptureQueriesContext(connections[pair.using]) as queries:
        services.create_job("noop", using=pair.using)
    assert len(queries) == 1, [q["sql"][:60] for q in queries]
    assert Run.objects.using(pair.using).count() == 1


def test_enqueue_is_one_statement_outside_a_transaction_and_inside_one(pair):
    if not on_postgresql(pair):
        pytest.skip("SQLite takes the bulk path (jobs/ingest/bulk.py)")
    with CaptureQueriesContext(connections[pair.using]) as queries:
        t.noop.enqueue(1)
    assert len(queries) == 1, [q["sql"][:60] for q in queries]
    with CaptureQueriesContext(connections[pair.using]) as queries:
        with transaction.atomic(using=pair.using):
            t.noop.enqueue(2)
    # The caller's BEGIN and COMMIT around the one statement: no savepoint. (A statement
    # bound on the server is logged as psycopg shows it: QUERY = 'WITH ...'.)
    assert len(queries) == 3
    assert [q["sql"].split()[0] for q in queries][::2] == ["BEGIN", "COMMIT"]
    assert "WITH j AS (INSERT" in queries[1]["sql"]
    assert waiting(pair) == 2


def test_a_create_rolled_back_with_its_transaction_leaves_nothing(pair):
    with pytest.raises(RuntimeError), transaction.atomic(using=pair.using):
        services.create_job("noop", using=pair.using)
        t.noop.enqueue(1)
        raise RuntimeError("roll back")

    assert not Job.objects.using(pair.using).exists()
    assert not Run.objects.using(pair.using).exists()
    assert waiting(pair) == 0


def test_a_later_run_waits_delayed_and_is_never_stored_ready(pair):
    job = services.create_job("noop", using=pair.using, delay_s=3600)

    run = Run.objects.using(pair.using).get(job_id=job.pk)
    assert run.state == RunState.SCHEDULED
    assert pair.lease(["default"], 1, "w1") == []


def test_on_the_database_broker_a_due_run_is_stored_ready_and_not_pushed(pair):
    if not (pair.ready_when_stored and on_postgresql(pair)):
        pytest.skip("the Redis broker holds the ready set: the run is pushed")
    with CaptureQueriesContext(connections[pair.using]) as queries:
        job = services.create_job("noop", using=pair.using)

    assert len(queries) == 1  # no promote after it
    assert job.created_run.state == RunState.QUEUED
    assert Run.objects.using(pair.using).get().state == RunState.QUEUED
    assert len(pair.lease(["default"], 1, "w1")) == 1


def test_enqueue_on_every_pair_returns_the_runs_id_and_creation(pair):
    result = t.noop.enqueue(1)

    run = Run.objects.using(pair.using).get()
    assert (result.id, result.enqueued_at) == (str(run.pk), run.created_at)


@pytest.mark.parametrize("delayed", [False, True])
@pytest.mark.parametrize("ready_if_due", [False, True])
def test_the_statement_is_short_enough_for_psycopg_to_cache_its_parsing(delayed, ready_if_due):
    # Above this many parameters psycopg parses the statement again on every call
    # (psycopg/_queries.py), which cost a database-broker enqueue a fifth of its CPU.
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH, MAX_CACHED_STATEMENT_PARAMS

    from jobs.ingest import one_off

    sql, _, _ = one_off._statement(connections["default"], delayed, ready_if_due)
    assert sql.count("%s") <= MAX_CACHED_STATEMENT_PARAMS
    assert len(sql) <= MAX_CACHED_STATEMENT_LENGTH


def test_a_job_made_positionally_equals_djangos_own():
    """one_off.new, the create's model constructor, gives what Model(**values) gives."""
    from jobs.ingest import one_off

    values = {"name": "n", "handler": "noop", "queue": "q", "priority": 3, "owner_id": None}
    ours, django = one_off.new(Job, values), Job(**values)
    for field in Job._meta.concrete_fields:
        if field.attname in ("created_at", "updated_at"):
            continue  # stamped at save
        assert getattr(ours, field.attname) == getattr(django, field.attname), field.name
    assert ours._state.adding and ours.pk is None


def test_each_create_stores_its_own_values(pair):
    """The prepared parameters kept per value (one_off._prepared) never leak between
    creates: each job and run holds what its create asked for."""
    asked = [("a", 1, "default", 10), ("b", 7, "mail", 20), ("a", 7, "default", 10)]
    made = [services.create_job("noop", using=pair.using, name=name, priority=priority,
                                queue=queue, timeout_s=timeout_s)
            for name, priority, queue, timeout_s in asked]
    stored = Job.objects.using(pair.using).in_bulk([job.pk for job in made])
    assert [(stored[job.pk].name, stored[job.pk].priority, stored[job.pk].queue,
             stored[job.pk].timeout_s) for job in made] == asked
    runs = Run.objects.using(pair.using).filter(job__in=[job.pk for job in made])
    assert sorted((run.priority, run.queue) for run in runs) == sorted(
        (priority, queue) for _, priority, queue, _ in asked)


def test_the_payload_is_stored_as_validation_serialised_it(pair):
    """The statement sends validation's JSON text of the payload (no second encoding):
    what is read back is the payload given, non-ASCII text and nesting included."""
    payload = {"text": "héllo 🌍 \u2028", "n": [1, 2.5, None, True], "d": {"k": {"é": []}}}
    job = services.create_job("noop", payload, using=pair.using)
    assert Job.objects.using(pair.using).get(pk=job.pk).payload == payload


def prepared_creates(connection) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements "
                       "WHERE statement LIKE 'WITH j AS (INSERT INTO %%'")
        return cursor.fetchone()[0]


def test_a_direct_session_prepares_the_create_and_a_pooled_one_never_does(pair):
    """Planned once per session, not per call (docs/performance.md, "The cost of an
    enqueue"); never through PgBouncer in transaction mode, whose configuration turns
    psycopg's preparing off (scheduler_project/settings.py), as a project's own
    DATABASES does unless it sets prepare_threshold."""
    if not on_postgresql(pair):
        pytest.skip("SQLite takes the bulk path (jobs/ingest/bulk.py)")
    if os.environ.get("DATABASE_POOLER") == "pgbouncer":
        pytest.skip("this lane's sessions go through PgBouncer: nothing is prepared")
    connection = connections[pair.using]
    connection.close()  # a session of its own: nothing prepared yet
    connection.ensure_connection()
    assert connection.connection.prepare_threshold == PREPARE_THRESHOLD
    for i in range(PREPARE_THRESHOLD + 1):
        t.noop.enqueue(i)
    assert prepared_creates(connection) == 1
    made = Job.objects.using(pair.using).order_by("pk").last()
    assert made.payload["args"] == [PREPARE_THRESHOLD]

    connection.close()
    connection.ensure_connection()
    connection.connection.prepare_threshold = None  # as DATABASE_POOLER=pgbouncer sets it
    for i in range(10):
        t.noop.enqueue(i)
    assert prepared_creates(connection) == 0
    assert Run.objects.using(pair.using).count() == 10 + PREPARE_THRESHOLD + 1


def test_the_one_statement_create_stores_every_column_as_the_bulk_create_does(pair):
    """Each parameter of the statement is read from its field (one_off._plain_read: the
    instance's value, or pre_save where that stamps one): a job with the optional fields
    of a one-off create set is stored alike by create_job (the statement) and by
    create_jobs (the bulk path), column for column, but for ids and creation stamps."""
    if not on_postgresql(pair):
        pytest.skip("SQLite takes the bulk path (jobs/ingest/bulk.py) both ways")
    from datetime import timedelta

    from django.utils import timezone

    run_at = timezone.now() + timedelta(hours=1)
    spec = {"name": "every-field", "queue": "mail", "shard_key": "tenant-7", "priority": 2,
            "timeout_s": 42, "max_attempts": 4, "run_at": run_at,
            "retry": {"kind": "exponential", "base_s": 3, "cap_s": 60},
            "expires_in_s": 900, "rate_key": "payload.who",
            "concurrency_key": "payload.who", "concurrency_limit": 3,
            "on_success": "echo", "on_failure": {"handler": "noop", "payload": {"x": 1}}}
    one = services.create_job("noop", {"who": "w", "n": [1, "é"]}, using=pair.using, **spec)
    bulk = services.create_jobs([{"handler": "noop", "payload": {"who": "w", "n": [1, "é"]},
                                  **spec}], using=pair.using)[0]
    stamps = {"id", "created_at", "updated_at"}
    jobs = Job.objects.using(pair.using).in_bulk([one.pk, bulk.pk])
    for field in Job._meta.concrete_fields:
        if field.attname not in stamps:
            assert (getattr(jobs[one.pk], field.attname)
                    == getattr(jobs[bulk.pk], field.attname)), field.attname
    runs = {run.job_id: run for run in Run.objects.using(pair.using)
            .filter(job_id__in=[one.pk, bulk.pk])}
    for field in Run._meta.concrete_fields:
        if field.attname not in stamps | {"job_id"}:
            assert (getattr(runs[one.pk], field.attname)
                    == getattr(runs[bulk.pk], field.attname)), field.attname
    assert jobs[one.pk].retry == spec["retry"] and runs[one.pk].run_at == run_at
