"""The worker's fast paths (BENCHMARKS.md, "W2 against the ceiling"): the one-statement
lease and ack on PostgreSQL, the lease plan under stale statistics, Lua scripts that
Redis forgot, and the pipe protocol between a worker and its child."""

import json
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from jobs.registry import handler
from runs.brokers import get_broker
from runs.clock import from_us, to_us
from runs.execution.leases import recent_span, start_statement
from runs.execution.transitions import run_refs
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.types import Lease, Outcome
from runs.worker import Slot
from tests.conftest import flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis_broker():
    flush_redis()
    yield get_broker("default", name="redis")
    flush_redis()


def leased(broker, count: int, **run_options) -> list[Lease]:
    runs = make_runs("default", count, **run_options)
    broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
    return broker.lease(["default"], count, "w1")


def test_a_batch_of_successes_is_acked_by_one_statement_fenced_on_the_attempt(redis_broker):
    leases = leased(redis_broker, 3)
    stale = Lease(leases[2].run_id, leases[2].attempt + 1, leases[2].queue, leases[2].shard,
                  leases[2].expires_at)
    outcomes = [Outcome(lease=le, outcome=AttemptOutcome.SUCCEEDED, result={"n": i})
                for i, le in enumerate([leases[0], leases[1], stale])]

    with CaptureQueriesContext(connection) as queries:
        accepted = redis_broker.complete(outcomes)

    assert accepted == [True, True, False]
    # And one read for the refused ack: is its run cancelled under that lease (its slots
    # then free at once, docs/isolation.md, "Concurrency limits")? It is not.
    assert len(queries) == 2, [q["sql"][:80] for q in queries]
    assert '"runs_run"."state" = ' in queries[1]["sql"]
    states = dict(Run.objects.filter(pk__in=[le.run_id for le in leases])
                  .values_list("pk", "state"))
    assert states == {leases[0].run_id: RunState.SUCCEEDED,
                      leases[1].run_id: RunState.SUCCEEDED,
                      leases[2].run_id: RunState.RUNNING}
    first = Attempt.objects.get(run_id=leases[0].run_id, number=leases[0].attempt)
    assert (first.outcome, first.result, first.finished_at is not None) == (
        AttemptOutcome.SUCCEEDED, {"n": 0}, True)
    assert Attempt.objects.get(run_id=leases[2].run_id).outcome == AttemptOutcome.RUNNING


def test_a_lease_is_one_statement_on_postgresql_with_the_redis_broker(redis_broker):
    runs = make_runs("default", 5, payload={"x": "é"})
    redis_broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))

    with CaptureQueriesContext(connection) as queries:
        leases = redis_broker.lease(["default"], 5, "w1")

    assert len(leases) == 5
    assert len(queries) == 1, [q["sql"][:80] for q in queries]
    assert json.loads(leases[0].task["payload"]) == {"x": "é"}
    assert Attempt.objects.filter(run_id__in=[r.pk for r in runs], worker_id="w1").count() == 5


def test_the_lease_plan_walks_the_ids_when_statistics_call_pending_runs_rare(redis_broker):
    # A history of finished runs, analysed; then a burst of pending runs the statistics
    # do not know of: the plan must still fetch the leased ids by primary key, not scan
    # every pending run through the state index (what happened before, at 20 ms a lease).
    old = make_runs("default", 3000)
    Run.objects.filter(pk__in=[r.pk for r in old]).update(state=RunState.SUCCEEDED)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run")
        cursor.execute("ANALYZE jobs_job")
    burst = make_runs("default", 3000)
    # Both forms: the recent partitions' (the first statement) and every partition's.
    for span in (recent_span(), None):
        sql, params = start_statement([r.pk for r in burst[:128]], "w1", 60, span)

        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            cursor.execute("ROLLBACK")

        # By primary key: the table's, or each time partition's (runs_run_p<day>_pkey).
        assert re.search(r"Index Scan (using|on) runs_run\w*_pkey", plan), plan
        assert "run_state_finished" not in plan, plan
        # Jobs are looked up per leased run, never hashed whole (20 ms a lease at 20,000).
        assert "Hash" not in plan, plan


def test_scripts_redis_forgot_are_loaded_again(redis_broker):
    runs = make_runs("default", 4)
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.script_flush()
    redis_broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
    client.script_flush()

    leases = redis_broker.lease(["default"], 4, "w1")
    client.script_flush()
    accepted = redis_broker.complete(
        [Outcome(lease=le, outcome=AttemptOutcome.SUCCEEDED) for le in leases])

    assert sorted(le.run_id for le in leases) == sorted(r.pk for r in runs)
    assert accepted == [True] * 4
    assert not redis_broker.depth() or all(d.leased == 0 for d in redis_broker.depth())


@handler("tests.ctx_times")
def ctx_times(ctx, payload):
    """The attempt's times as the handler sees them."""
    return [ctx.scheduled_at.isoformat(), ctx.deadline.isoformat(), payload]


def test_task_times_cross_the_pipe_exactly():
    scheduled = datetime(2026, 11, 29, 23, 59, 59, 999_999, tzinfo=ZoneInfo("Europe/Paris"))
    deadline = datetime(2026, 11, 29, 22, 0, 0, 1, tzinfo=UTC)
    assert from_us(to_us(scheduled)) == scheduled and from_us(to_us(deadline)) == deadline
    slot = Slot()
    try:
        slot.send([{"run_id": 1, "job_id": 1, "attempt": 1, "seq": 1, "handler": "tests.ctx_times",
                    "scheduled_at": to_us(scheduled), "deadline": to_us(deadline),
                    "payload": json.dumps({"a": [1, "ü"]})}])
        assert slot.conn.poll(30)
        [done] = [m for m in slot.receive() if m[0] == "done"]
    finally:
        slot.kill()

    assert done[3] is True, done[5]
    assert done[4] == [scheduled.astimezone(UTC).isoformat(), deadline.isoformat(),
                       {"a": [1, "ü"]}]


def test_a_child_runs_a_batch_sent_in_one_message_and_its_replies_are_all_read():
    # Payloads large enough that the replies and tasks span several pipe reads.
    slot = Slot()
    try:
        now = datetime.now(UTC)
        big = "x" * 100_000
        tasks = [{"run_id": i, "job_id": 1, "attempt": 1, "seq": i + 1, "scheduled_at": to_us(now),
                  "deadline": to_us(now + timedelta(seconds=30)), "handler": "echo",
                  "payload": json.dumps({"i": i, "pad": big if i % 10 == 0 else ""})}
                 for i in range(40)]
        slot.send(tasks)
        done = []
        deadline = time.monotonic() + 30
        while len(done) < len(tasks) and time.monotonic() < deadline:
            if slot.conn.poll(1):
                done += [m for m in slot.receive() if m[0] == "done"]
    finally:
        slot.kill()

    assert [m[1] for m in done] == list(range(40))
    assert all(m[3] for m in done), [m[5] for m in done if not m[3]][:1]
    assert done[10][4]["pad"] == big


def test_runs_whose_lease_statement_failed_are_given_back_by_the_next_reap(redis_broker):
    # The Redis claim is made before the database statement; when that statement fails
    # (here for real: a row lock held elsewhere and a lock timeout), the claims used to
    # hold the runs until they lapsed, LEASE_TTL_S (a minute) later.
    runs = make_runs("default", 5)
    redis_broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
    params = connection.settings_dict
    holder = psycopg.connect(host=params["HOST"] or "127.0.0.1", port=params["PORT"] or 5432,
                             user=params["USER"] or "postgres", dbname=params["NAME"])
    try:
        holder.execute("SELECT 1 FROM runs_run WHERE id = %s FOR UPDATE", [runs[0].pk])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '100ms'")
        with pytest.raises(OperationalError):
            redis_broker.lease(["default"], 5, "w1")
    finally:
        holder.rollback()
        holder.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

    redis_broker.reap()

    leases = redis_broker.lease(["default"], 5, "w1")
    assert sorted(le.run_id for le in leases) == sorted(r.pk for r in runs)


def test_a_lease_that_fails_after_its_claims_lapsed_leaves_the_new_claims_alone(
        redis_broker, settings):
    # Found by an adversarial review: worker A's statement waits on a lock past its
    # claims' TTL, the reap gives the runs back, worker B claims and starts one of them,
    # then A's statement fails. Letting A's claims lapse then ended B's claim (the claim
    # has no owner in Redis): the next reap uncounted B's running run and the queue went
    # over its concurrency limit.
    settings.SCHEDULER = {"QUEUE_CONCURRENCY": "default=2", "LEASE_TTL_S": 1.0}
    redis_broker._known_at = float("-inf")
    r, x, s1, s2 = make_runs("default", 4)
    redis_broker.push(run_refs(Run.objects.filter(pk__in=[r.pk, x.pk])))
    params = connection.settings_dict
    holder = psycopg.connect(host=params["HOST"] or "127.0.0.1", port=params["PORT"] or 5432,
                             user=params["USER"] or "postgres", dbname=params["NAME"])
    holder.execute("SELECT 1 FROM runs_run WHERE id = %s FOR UPDATE", [x.pk])
    out = {}

    def lease(name, n, **options):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = '3s'")
            out[name] = redis_broker.lease(["default"], n, name, **options)
        except OperationalError as exc:
            out[name] = exc
        finally:
            connection.close()

    # A claims r and x for 1 s; its statement locks r and waits on x.
    a = threading.Thread(target=lease, args=("A", 2))
    a.start()
    time.sleep(0.3)
    settings.SCHEDULER = {"QUEUE_CONCURRENCY": "default=2"}  # B's claim lasts
    time.sleep(1.2)
    redis_broker.reap()  # A's claims lapsed: r and x (still queued) go back to ready
    b = threading.Thread(target=lease, args=("B", 1))
    b.start()  # B claims r; its statement waits on A's lock on r
    a.join()
    b.join()
    holder.rollback()
    holder.close()
    assert isinstance(out["A"], OperationalError)
    assert [le.run_id for le in out["B"]] == [r.pk]

    redis_broker.reap()

    key = redis_broker.keys.leased("default", 0)
    assert redis_broker.client.zscore(key, str(r.pk)) is not None
    assert redis_broker.running_counts().get("q:default") == 1
    redis_broker.push(run_refs(Run.objects.filter(pk__in=[s1.pk, s2.pk])))
    redis_broker.lease(["default"], 2, "C")
    assert Run.objects.filter(state="running").count() == 2
