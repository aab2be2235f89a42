"""The ack of workflow nodes' successes as one call on PostgreSQL (workflows/execution/ack_pg.py,
workflows/sql/ack_succeeded.sql; docs/workflows.md, "Latency"), on every
broker/database pair: one round trip where the call serves, the same rows as the ORM
path everywhere; pause and resume exact against a call held open before its commit; an
error in the engine's part leaves the ack standing and the reconcile repairs the rest."""

import logging
import threading
import zlib

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from jobs.registry import handler
from runs.execution.continuation import Offer
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.types import Outcome
from tests.conftest import wait_until
from tests.test_workflows_engine import drain, node, start, states
from tests.test_workflows_pause_race import (
    b_finishes_paused_then_the_resume_ends_it,
    b_run,
    in_thread,
    waiting_on_a_lock,
)
from tests.test_workflows_races import lease_all
from workflows import control, reconcile, services
from workflows.models import NodeRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
HOLD_KEY = 7391  # the advisory lock a held ack waits on at its commit


@handler("wf.one")
def noop(ctx, payload):
    return None


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05, "SHARDS": 8}
    return broker


@pytest.fixture
def pg_pair(pair):
    if pair.using != "default":
        pytest.skip("the one-call ack is PostgreSQL's")
    return pair


def chain(broker, *names):
    nodes = [{"name": n, "handler": "wf.one", "payload": {}} for n in names]
    workflow = services.create_workflow("c", nodes, list(zip(names, names[1:], strict=False)),
                                        using=broker.using)
    return services.start_workflow_run(workflow, using=broker.using)


def run_of(broker, workflow_run, name) -> Run | None:
    run_id = NodeRun.objects.using(broker.using).get(
        workflow_run=workflow_run, node__name=name).run_id
    return Run.objects.using(broker.using).filter(pk=run_id).first()


def test_a_continued_nodes_ack_is_one_round_trip_and_continues_the_next(pair):
    broker = pair
    wr = chain(broker, "a", "b", "c")
    [lease] = lease_all(broker, 1)
    first = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], first) == [True]
    [(b_lease, _)] = first.taken

    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    with CaptureQueriesContext(connections[broker.using]) as queries:
        accepted = broker.complete([Outcome(b_lease, AttemptOutcome.SUCCEEDED,
                                            result={"n": 2}, watched=True)], offer)

    assert accepted == [True]
    if broker.using == "default":
        # The runs' ack, the node runs, the readiness read, the insert, the lease and
        # the commit: one statement in autocommit.
        assert len(queries) == 1, [q["sql"][:80] for q in queries]
    b, c = run_of(broker, wr, "b"), run_of(broker, wr, "c")
    assert (b.state, b.result, b.lease_expires_at) == (RunState.SUCCEEDED, {"n": 2}, None)
    attempt = Attempt.objects.using(broker.using).get(run=b, number=1)
    assert (attempt.outcome, attempt.result) == (AttemptOutcome.SUCCEEDED, {"n": 2})
    assert (c.state, c.attempt, c.worker_id) == (RunState.RUNNING, 1, "w1")
    assert c.shard == zlib.crc32(b"wf.one") % 8
    [(c_lease, owner)] = offer.taken
    assert (c_lease.run_id, c_lease.attempt, c_lease.shard, owner) == (c.pk, 1, c.shard, None)
    if broker.using == "default":  # the lease's own statement gives the task there
        assert (c_lease.task["handler"], c_lease.task["payload"]) == ("wf.one", "{}")
    view = services.get_workflow_run(wr.pk, using=broker.using)
    assert states(view) == {"a": "succeeded", "b": "succeeded", "c": "running"}
    # A stale ack of b changes nothing and continues nothing.
    again = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    assert broker.complete([Outcome(b_lease, AttemptOutcome.SUCCEEDED, watched=True)],
                           again) == [False]
    assert again.taken == []

    assert broker.complete([Outcome(c_lease, AttemptOutcome.SUCCEEDED, watched=True)]) == [True]
    assert services.get_workflow_run(wr.pk, using=broker.using)["state"] == "succeeded"


def test_a_run_the_worker_cannot_take_is_pushed_with_its_shard(pair):
    broker = pair
    wr = chain(broker, "a", "b")
    [lease] = lease_all(broker, 1)
    offer = Offer("w1", frozenset({"other"}), room=1, ttl_s=30.0)

    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer) == [True]

    assert (offer.taken, offer.pushed) == ([], 1)
    b = run_of(broker, wr, "b")
    assert b.shard == zlib.crc32(b"wf.one") % 8
    [again] = lease_all(broker, 1)
    assert (again.run_id, again.shard) == (b.pk, b.shard)


def hold_acks_at_commit():
    """Make every ack that moves a node run hold its transaction open at its commit
    (a deferred constraint trigger waiting on advisory lock HOLD_KEY, which the calling
    connection holds): the one-call ack has no Python inside its transaction to hold
    it, as tests/test_workflows_pause_race.py's listener holds the ORM path's."""
    with connections["default"].cursor() as cursor:
        cursor.execute(f"""
            CREATE OR REPLACE FUNCTION test_hold_ack() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_advisory_xact_lock({HOLD_KEY}); RETURN NULL; END $$;
            CREATE CONSTRAINT TRIGGER test_hold_ack AFTER UPDATE ON workflows_noderun
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
            WHEN (NEW.state = 'succeeded') EXECUTE FUNCTION test_hold_ack();
            SELECT pg_advisory_lock({HOLD_KEY});""")


def release_held_acks():
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock_all()")


def drop_hold():
    # After the threads ended: a DROP waiting for the held ack would queue the lock the
    # control call's next statement asks for behind it.
    release_held_acks()
    with connections["default"].cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS test_hold_ack ON workflows_noderun;"
                       " DROP FUNCTION IF EXISTS test_hold_ack()")


def held_ack_pid() -> int | None:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT a.pid FROM pg_locks AS l JOIN pg_stat_activity AS a"
                       " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND NOT l.granted"
                       " AND l.objid = %s AND a.query LIKE '%%workflows_ack_succeeded%%'",
                       [HOLD_KEY])
        row = cursor.fetchone()
    return row[0] if row else None


def race_one_call(pair, workflow_run, control_call) -> dict:
    """Ack node a's run in one call and, while that call waits at its commit, call
    ``control_call`` on another connection; let the commit go once the call returned or
    waits on a lock. Returns what the call returned and b's run as it saw it then."""
    [lease] = lease_all(pair, 1)
    seen: dict = {}
    hold_acks_at_commit()
    try:
        ack = in_thread(lambda: seen.setdefault("acked", pair.complete(
            [Outcome(lease, AttemptOutcome.SUCCEEDED, result={"me": "a"})])))
        wait_until(lambda: held_ack_pid() is not None, timeout=60,
                   message="the one-call ack to wait at its commit")

        def call():
            with connections[pair.using].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                seen["pid"] = cursor.fetchone()[0]
            seen["returned"] = control_call(workflow_run, using=pair.using)
            seen["b_run_at_return"] = b_run(pair.using, workflow_run)

        caller = in_thread(call)
        wait_until(lambda: "returned" in seen or waiting_on_a_lock(seen.get("pid")),
                   timeout=60, message="the control call to return or wait on a lock")
        release_held_acks()
        ack.join(60)
        caller.join(60)
    finally:
        drop_hold()
    assert seen["acked"] == [True]
    return seen


def test_pause_during_a_one_call_ack_returns_only_once_no_new_node_run_can_appear(pg_pair):
    wr = start(pg_pair, [node("a"), node("b"), node("c")], [["a", "b"], ["b", "c"]])

    seen = race_one_call(pg_pair, wr, control.pause_workflow_run)

    assert seen["returned"] is True
    assert b_run(pg_pair.using, wr) == seen["b_run_at_return"]
    assert services.get_workflow_run(wr.pk, using=pg_pair.using)["state"] == "paused"
    b_finishes_paused_then_the_resume_ends_it(pg_pair, wr)


def test_resume_during_a_one_call_ack_starts_what_the_ack_made_ready(pg_pair):
    wr = start(pg_pair, [node("a"), node("b")], [["a", "b"]])
    assert control.pause_workflow_run(wr, using=pg_pair.using)

    seen = race_one_call(pg_pair, wr, control.resume_workflow_run)

    assert seen["returned"] is True
    view = services.get_workflow_run(wr.pk, using=pg_pair.using)
    assert (view["state"], states(view)) == ("running", {"a": "succeeded", "b": "running"})
    assert drain(pg_pair, wr)["state"] == "succeeded"


def test_an_engine_error_in_the_call_leaves_the_ack_standing(pg_pair, caplog):
    broker = pg_pair
    wr = chain(broker, "a", "b")
    [lease] = lease_all(broker, 1)
    with connections["default"].cursor() as cursor:
        cursor.execute("""
            CREATE OR REPLACE FUNCTION test_refuse_start() RETURNS trigger LANGUAGE plpgsql
            AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
            CREATE TRIGGER test_refuse_start BEFORE UPDATE ON workflows_noderun FOR EACH ROW
            WHEN (NEW.state = 'running') EXECUTE FUNCTION test_refuse_start();""")
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    try:
        with caplog.at_level(logging.ERROR, logger="scheduler.hooks"):
            accepted = broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer)
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("DROP TRIGGER test_refuse_start ON workflows_noderun;"
                           " DROP FUNCTION test_refuse_start()")

    assert accepted == [True]
    assert Run.objects.get(pk=lease.run_id).state == RunState.SUCCEEDED
    assert "refused by the test" in caplog.text
    # The engine's part rolled back whole: a's node run, b's run, its lease.
    assert offer.taken == []
    assert states(services.get_workflow_run(wr.pk)) == {"a": "running", "b": "pending"}
    assert Run.objects.filter(job_id=NodeRun.objects.get(workflow_run=wr, node__name="b")
                              .node.job_id).count() == 0
    # The reconcile gives a's node run its run's outcome, which makes b ready.
    assert reconcile.reconcile(using=broker.using)["finished"] == 1
    assert drain(broker, wr)["state"] == "succeeded"


def test_two_upstreams_in_two_calls_at_once_make_the_downstream_run_once(pg_pair):
    broker = pg_pair
    wr = start(broker, [node("a"), node("b"), node("c")], [["a", "c"], ["b", "c"]])
    leases = lease_all(broker, 2)
    barrier = threading.Barrier(2)
    got = []

    def ack(lease):
        barrier.wait(10)
        got.append(broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)]))

    threads = [in_thread(lambda lease=lease: ack(lease)) for lease in leases]
    for thread in threads:
        thread.join(60)

    assert got == [[True], [True]]
    c = NodeRun.objects.get(workflow_run=wr, node__name="c")
    assert c.state == "running" and c.run_id is not None
    assert Run.objects.filter(job_id=c.node.job_id).count() == 1
    assert drain(broker, wr)["state"] == "succeeded"


def test_the_brokers_bookkeeping_after_an_ack_can_be_handed_on(pair):
    # The worker queues it on its ack lane (runs/worker/acks.py): until it runs, the
    # broker still holds the finished run as leased and not yet the continued one.
    broker = pair
    wr = chain(broker, "a", "b")
    [lease] = lease_all(broker, 1)
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    later = []

    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer,
                           after=later.append) == [True]

    [(b_lease, _)] = offer.taken
    assert run_of(broker, wr, "b").state == RunState.RUNNING
    assert len(later) == 1
    if broker.name == "redis":
        leased = broker.keys.leased("default", lease.shard)
        assert broker.client.zscore(leased, str(lease.run_id)) is not None
        assert broker.client.zscore(broker.keys.leased("default", b_lease.shard),
                                    str(b_lease.run_id)) is None
    later[0]()
    if broker.name == "redis":
        assert broker.client.zscore(leased, str(lease.run_id)) is None
        assert broker.client.zscore(broker.keys.leased("default", b_lease.shard),
                                    str(b_lease.run_id)) is not None
        running = broker.client.hget(broker.keys.running("default"), "q:default")
        assert int(running or 0) == 1
    assert broker.complete([Outcome(b_lease, AttemptOutcome.SUCCEEDED, watched=True)]) == [True]
    assert services.get_workflow_run(wr.pk, using=broker.using)["state"] == "succeeded"


def test_a_paused_workflow_run_whose_last_node_succeeds_in_the_call_stays_paused(pair):
    # As engine.finish_if_done: a paused run's outcome is its resume's to decide.
    broker = pair
    wr = chain(broker, "a", "b")
    [lease] = lease_all(broker, 1)
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer) == [True]
    [(b_lease, _)] = offer.taken
    assert control.pause_workflow_run(wr, using=broker.using)

    assert broker.complete([Outcome(b_lease, AttemptOutcome.SUCCEEDED, watched=True)]) == [True]

    view = services.get_workflow_run(wr.pk, using=broker.using)
    assert (view["state"], states(view)) == ("paused", {"a": "succeeded", "b": "succeeded"})
    assert control.resume_workflow_run(wr, using=broker.using)
    assert services.get_workflow_run(wr.pk, using=broker.using)["state"] == "succeeded"


def test_the_previous_releases_function_stays_beside_the_new_one_for_a_rolling_deploy():
    """The signature with the trace contexts and, beside it, the twelve-argument one of
    the releases before them (workflows/sql/ack_succeeded_untraced.sql) and the
    ten-argument one of those before the priority rule (ack_succeeded_compat.sql): a
    worker of those, still running mid-deploy, calls its own and its acks go on being
    applied (tests/test_workflows_sql.py calls them)."""
    connection = connections["default"]
    if connection.vendor != "postgresql":
        pytest.skip("the function is PostgreSQL's")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_function_identity_arguments(oid) FROM pg_proc "
                       "WHERE proname = 'workflows_ack_succeeded'")
        signatures = sorted(row[0].count(",") + 1 for row in cursor.fetchall())
    assert signatures == [10, 12, 13]
