"""Cancel of a workflow run racing an ack, on the PostgreSQL pairs (docs/workflows.md,
"Cancel and pause": a cancelled workflow run's live node runs are cancelled). The ack of
a node's run is held open inside its transaction, after the engine made the downstream
run (pushed, or continued on the acking worker: runs/execution/continuation.py), while another
connection cancels the workflow run. Once the cancel has returned, no run of that
workflow run may be left live: not the one the ack made while the cancel waited on its
lock. SQLite serialises writers, so the race is PostgreSQL's."""

import threading

import pytest
from django.db import connections, transaction

from runs.execution import hooks
from runs.execution.continuation import Offer
from runs.models import PENDING_STATES, AttemptOutcome, Run, RunState
from runs.types import Outcome
from tests.conftest import wait_until
from tests.test_workflows_engine import node, start
from tests.test_workflows_pause_race import HoldAck, in_thread, pg_pair, waiting_on_a_lock
from tests.test_workflows_races import lease_all
from workflows import control, services

__all__ = ["pg_pair"]  # the fixture, imported for its use here

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def pid_of(seen: dict, key: str) -> None:
    """Note this thread's PostgreSQL backend pid in ``seen[key]`` (waiting_on_a_lock)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        seen[key] = cursor.fetchone()[0]


@pytest.mark.parametrize("continued", [False, True], ids=["pushed", "continued"])
def test_a_cancel_racing_an_ack_leaves_no_live_run_of_the_workflow_run(pg_pair, continued):
    broker = pg_pair
    wr = start(broker, [node("a"), node("b"), node("c")], [["a", "b"], ["b", "c"]])
    lease = lease_all(broker, 1)[0]
    offer = Offer("racer", frozenset({"default"}), room=1, ttl_s=30.0) if continued else None
    hold = HoldAck(lease.run_id)
    hooks.register(hold)
    seen: dict = {}
    try:
        ack = in_thread(lambda: broker.complete(
            [Outcome(lease, AttemptOutcome.SUCCEEDED, result={"me": "a"})], offer))
        assert hold.inside.wait(60), "the ack never reached the engine"

        def cancel():
            pid_of(seen, "pid")
            seen["returned"] = control.cancel_workflow_run(wr, using=broker.using)

        caller = in_thread(cancel)
        wait_until(lambda: "returned" in seen or waiting_on_a_lock(seen.get("pid")),
                   timeout=60, message="the cancel to return or wait on a lock")
        hold.release.set()
        ack.join(60)
        caller.join(60)
    finally:
        hold.release.set()
        hooks._listeners.remove(hold)

    assert seen["returned"] is True
    view = services.get_workflow_run(wr.pk, using=broker.using)
    assert view["state"] == "cancelled"
    made = [n["run_id"] for n in view["nodes"] if n["run_id"]]
    live = list(Run.objects.using(broker.using).filter(
        pk__in=made, state__in=[*PENDING_STATES, RunState.RUNNING]).values_list("pk", "state"))
    assert live == [], "a run of the cancelled workflow run is still live after the cancel"
    assert {n["name"]: n["state"] for n in view["nodes"]} == {
        "a": "succeeded", "b": "cancelled", "c": "cancelled"}


def test_a_cancel_racing_a_resume_cancels_the_run_the_resume_made(pg_pair):
    """The resume holds b's pending row while it makes b's run (held there by a rival,
    uncommitted insert of the same run), and the cancel waits on that row: once both have
    returned, b's run must be cancelled, not left to run in a cancelled workflow run."""
    broker = pg_pair
    wr = start(broker, [node("a"), node("b"), node("c")], [["a", "b"], ["b", "c"]])
    assert control.pause_workflow_run(wr, using=broker.using)
    lease = lease_all(broker, 1)[0]
    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED, result={})]) == [True]
    b_job = wr.workflow.nodes.using(broker.using).get(name="b").job

    seen: dict = {}
    rival_in, rival_out = threading.Event(), threading.Event()

    class Rollback(Exception):
        pass

    def rival():
        try:
            with transaction.atomic(using=broker.using):
                Run.objects.using(broker.using).create(
                    job=b_job, scheduled_at=wr.scheduled_at, run_at=wr.scheduled_at,
                    queue="default", max_attempts=1)
                rival_in.set()
                assert rival_out.wait(60)
                raise Rollback
        except Rollback:
            pass

    def resume():
        pid_of(seen, "resume_pid")
        seen["resumed"] = control.resume_workflow_run(wr, using=broker.using)

    def cancel():
        pid_of(seen, "cancel_pid")
        seen["cancelled"] = control.cancel_workflow_run(wr, using=broker.using)

    threads = [in_thread(rival)]
    try:
        assert rival_in.wait(60)
        threads.append(in_thread(resume))
        wait_until(lambda: waiting_on_a_lock(seen.get("resume_pid")), timeout=60,
                   message="the resume to wait on the rival insert")
        threads.append(in_thread(cancel))
        wait_until(lambda: "cancelled" in seen or waiting_on_a_lock(seen.get("cancel_pid")),
                   timeout=60, message="the cancel to return or wait on a lock")
    finally:
        rival_out.set()
        for thread in threads:
            thread.join(60)

    assert (seen["resumed"], seen["cancelled"]) == (True, True)
    view = services.get_workflow_run(wr.pk, using=broker.using)
    made = [n["run_id"] for n in view["nodes"] if n["run_id"]]
    live = list(Run.objects.using(broker.using).filter(
        pk__in=made, state__in=[*PENDING_STATES, RunState.RUNNING]).values_list("pk", "state"))
    assert (view["state"], live) == ("cancelled", [])


def test_a_requeue_while_a_workflow_is_cancelled_revives_nothing_of_it(pg_pair):
    """cancel_workflow cancelled the node jobs last, after cancelling each live workflow
    run: a retry of a dead node of a failed workflow run in between was accepted and
    revived it, and its nodes ran after the cancel had returned (an adversary's finding).
    Here a pending node run of a live workflow run is held locked, so the cancel waits
    between its first transaction and the cancel of that run; the requeue made then
    must leave the dead run dead."""
    from runs import services as run_services
    from workflows.models import NodeRun, WorkflowRun

    broker = pg_pair
    failed = start(broker, [node("a", max_attempts=1), node("b")], [["a", "b"]])
    [dead] = lease_all(broker, 1)
    broker.complete([Outcome(dead, AttemptOutcome.FAILED, error="boom", retry=False)])
    assert WorkflowRun.objects.get(pk=failed.pk).state == "failed"
    live = services.start_workflow_run(failed.workflow_id, run_key="live")
    held_row = NodeRun.objects.get(workflow_run=live, node__name="b").pk
    holding, release, seen, done = threading.Event(), threading.Event(), {}, {}

    def hold():
        with transaction.atomic():
            NodeRun.objects.select_for_update().get(pk=held_row)
            holding.set()
            release.wait(30)

    def cancel():
        pid_of(seen, "cancel")
        done["cancelled"] = control.cancel_workflow(failed.workflow_id)

    holder = in_thread(hold)
    assert holding.wait(10)
    canceller = in_thread(cancel)
    wait_until(lambda: waiting_on_a_lock(seen.get("cancel")), timeout=10,
               message="the cancel waiting on the held node run")
    requeued = run_services.requeue([dead.run_id])
    release.set()
    holder.join(10)
    canceller.join(30)

    assert done == {"cancelled": True} and requeued == 0
    assert set(WorkflowRun.objects.filter(workflow_id=failed.workflow_id)
               .values_list("state", flat=True)) == {"failed", "cancelled"}
    assert not Run.objects.filter(job__workflow_node__workflow_id=failed.workflow_id,
                                  state__in=[*PENDING_STATES, RunState.RUNNING]).exists()
