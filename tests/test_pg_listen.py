"""Idle workers of the database broker wake by PostgreSQL LISTEN/NOTIFY
(runs/brokers/pg_listen.py; docs/performance.md, "Waking idle workers on the database
broker"). Each test gives the worker a poll of 30 s: a run started well within it (its
attempt's start against the moment it became ready, both on the database clock) was
woken by a NOTIFY, not found by a poll. The bounds are the poll's half, not a speed: a
woken worker takes milliseconds. (The time a worker serves says nothing here:
serve_while stops it once its runs succeeded.)"""

import os
import threading
import time

import pytest
from django.db import connection, connections

from jobs.registry import handler
from jobs.services import create_job, create_jobs
from runs.brokers import get_broker
from runs.models import Attempt, Run
from runs.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

POLL_S = 30.0


@handler("listen.noop")
def noop(ctx, payload):
    return None


@handler("listen.crash")
def crash(ctx, payload):
    time.sleep(1.0)  # the other child's lease is in its idle wait by then
    os._exit(3)


@pytest.fixture
def db_broker(settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "database", "WORKER_POLL_S": POLL_S}
    broker = get_broker("default", name="database")
    yield broker
    broker.end_waits()


def serve_while(steps, runs: int | None = None, worker: Worker | None = None) -> None:
    """Serve ``worker`` while ``steps`` (a callable) runs in a thread of its own; without
    a worker, one with one child on "default", stopped once ``steps`` has returned and
    ``runs`` runs have succeeded (within a quarter poll, or the test fails). Not
    max_runs: a worker stopping at it could sit out a whole poll (30 s) first."""
    failed = []
    stopping = worker is None
    worker = worker or Worker(["default"], concurrency=1)

    def run_steps():
        try:
            steps()
            deadline = time.monotonic() + POLL_S / 4
            while stopping and Run.objects.filter(state="succeeded").count() < runs:
                assert time.monotonic() < deadline, f"{runs} runs not done in time"
                time.sleep(0.05)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)
        finally:
            if stopping:
                worker.request_stop()
            connection.close()

    thread = threading.Thread(target=run_steps)
    thread.start()
    worker.serve()
    thread.join()
    assert not failed, failed


def late_s(job) -> float:
    """Seconds from ``job``'s run becoming due to its first attempt's start."""
    run = job.runs.get()
    assert run.state == "succeeded"
    return (Attempt.objects.get(run=run).started_at - run.scheduled_at).total_seconds()


def succeeded_soon(run_id: int, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while Run.objects.get(pk=run_id).state != "succeeded":
        assert time.monotonic() < deadline, f"run {run_id} not done in {within_s} s"
        time.sleep(0.05)


def listen_backends() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = "
                       "'scheduler listen' AND datname = current_database()")
        return [row[0] for row in cursor.fetchall()]


def test_an_idle_worker_starts_a_run_stored_ready_at_once(db_broker):
    """A one-off job stored ready (jobs/ingest/one_off.py) notifies its queue in its statement:
    before, the idle worker slept out its poll before leasing it."""
    made = []

    def create_soon():
        time.sleep(1.0)  # the worker's first lease has come back empty by then
        made.append(create_job("listen.noop"))

    serve_while(create_soon, runs=1)

    assert late_s(made[0]) < POLL_S / 2, "the worker slept out its poll: no NOTIFY woke it"


def test_an_idle_worker_starts_runs_a_promote_and_a_push_made_ready_at_once(db_broker):
    """A delayed run falls due in the dispatcher's promote, and a bulk create's runs are
    pushed (promoted by the push): each transaction notifies the queues it made ready."""
    made = []

    def create_soon():
        time.sleep(1.0)
        made.append(create_job("listen.noop", delay_s=0.3))
        time.sleep(0.5)
        assert db_broker.promote() == 1  # as the dispatcher's next round does
        succeeded_soon(made[0].runs.get().pk, POLL_S / 4)
        made.extend(create_jobs([{"handler": "listen.noop"}] * 2))

    serve_while(create_soon, runs=3)

    assert [late_s(job) < POLL_S / 2 for job in made] == [True] * 3


def test_a_killed_listen_connection_is_opened_again_and_the_worker_still_wakes(db_broker):
    """The listen connection ended by the server (pg_terminate_backend, as a failover or
    an idle-session timeout would): the worker opens another and is woken again."""
    made = []

    def kill_between_two_jobs():
        time.sleep(1.0)
        made.append(create_job("listen.noop"))
        succeeded_soon(made[0].runs.get().pk, POLL_S / 4)
        killed = listen_backends()
        assert killed, "no listen connection to end"
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid",
                           [killed])
        deadline = time.monotonic() + POLL_S / 4
        while not set(listen_backends()) - set(killed):
            assert time.monotonic() < deadline, "the listen connection was not opened again"
            time.sleep(0.05)
        made.append(create_job("listen.noop"))

    serve_while(kill_between_two_jobs, runs=2)

    assert [late_s(job) < POLL_S / 2 for job in made] == [True] * 2


def test_a_child_is_replaced_without_waiting_out_an_idle_wait(db_broker):
    """A child's replacement pauses the lease lane (no thread may run beside a fork) and
    waits for its calls: one in a 30 s idle wait held the worker's loop until the wait
    ended, so the crash (and every other outcome) was recorded up to 30 s late. The
    wait now ends when the lane pauses."""
    worker = Worker(["default"], concurrency=2)  # one child idle: its lease waits
    made = []

    def crash_then_stop():
        try:
            time.sleep(1.0)
            made.append(create_job("listen.crash", max_attempts=1))
            deadline = time.monotonic() + POLL_S / 2
            while made[0].runs.get().state != "dead":
                assert time.monotonic() < deadline, "the crash was not recorded in time"
                time.sleep(0.05)
        finally:
            worker.request_stop()

    serve_while(crash_then_stop, worker=worker)

    assert made[0].runs.get().state == "dead"


def test_a_direct_listen_url_is_used_for_the_listen_connection(db_broker, settings):
    """DATABASE_LISTEN_URL (the server itself, where the rest goes through PgBouncer)
    names the listen connection's server; here the test database, directly."""
    params = connections["default"].get_connection_params()
    settings.DATABASE_LISTEN_URL = (
        f"postgresql://{params.get('user', '')}@{params.get('host') or '127.0.0.1'}:"
        f"{params.get('port') or 5432}/{params['dbname']}?application_name=overridden")
    made = []

    def create_soon():
        time.sleep(1.0)
        assert listen_backends(), "the listen connection is not open"
        made.append(create_job("listen.noop"))

    serve_while(create_soon, runs=1)

    assert late_s(made[0]) < POLL_S / 2


def test_an_unreachable_listen_url_leaves_the_worker_polling(db_broker, settings):
    """No server where DATABASE_LISTEN_URL points: the wait says it did not wait (the
    worker polls at WORKER_POLL_S) instead of failing its leases, and retries later."""
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKER_POLL_S": 0.05}
    settings.DATABASE_LISTEN_URL = "postgresql://postgres@127.0.0.1:9/nowhere"
    assert db_broker.wait_ready(["default"], 0.2) is False
    assert db_broker.wait_ready(["default"], 0.2) is False  # backing off: no new try
    job = create_job("listen.noop")

    Worker(["default"], concurrency=1, max_runs=1).serve()

    assert job.runs.get().state == "succeeded"


def test_the_database_broker_on_sqlite_polls():
    assert get_broker("sqlite", name="database").wait_ready(["default"], 0.2) is False


def test_a_transaction_making_many_runs_ready_notifies_each_queue_once(db_broker):
    """One notification per queue per transaction, not per run: a bulk create of eight
    runs in two queues (pushed, and so promoted, in one transaction) sends two."""
    import psycopg

    from runs.brokers import pg_listen

    with psycopg.connect(**pg_listen.listen_params("default")) as listener:
        listener.execute(f"LISTEN {pg_listen.CHANNEL}")
        create_jobs([{"handler": "listen.noop", "queue": "a"}] * 5
                    + [{"handler": "listen.noop", "queue": "b"}] * 3)
        heard = [n.payload for n in listener.notifies(timeout=2.0)]

    assert sorted(heard) == ["a", "b"]


def test_a_promote_is_one_statement_moving_due_runs_and_notifying_their_queues(db_broker):
    """A worker that slept to its next run's time promotes it before its lease
    (runs/brokers/database.py, _claim): the ORM's promote took six round trips there,
    the database broker's W3 lag (runs/brokers/db_promote.py). Runs not yet due, and
    queues not asked for, stay delayed."""
    import psycopg
    from django.test.utils import CaptureQueriesContext

    from runs.brokers import pg_listen

    due = [create_job("listen.noop", queue=q, delay_s=0.2).runs.get() for q in ("a", "b")]
    later = create_job("listen.noop", queue="a", delay_s=60).runs.get()
    time.sleep(0.3)
    with psycopg.connect(**pg_listen.listen_params("default")) as listener:
        listener.execute(f"LISTEN {pg_listen.CHANNEL}")
        with CaptureQueriesContext(connection) as queries:
            moved = db_broker._promote(10, queues=["a"], announce={"c"})
        heard = sorted(n.payload for n in listener.notifies(timeout=1.0))

    assert (moved, len(queries)) == (1, 1), [q["sql"][:60] for q in queries]
    states = dict(Run.objects.values_list("pk", "state"))
    assert [states[due[0].pk], states[due[1].pk], states[later.pk]] == [
        "queued", "scheduled", "scheduled"]
    assert heard == ["a", "c"]
