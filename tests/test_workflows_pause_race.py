"""Pause and resume of a workflow run racing an ack, on the PostgreSQL pairs
(docs/workflows.md, "Cancel and pause": pause is exact). The ack of a node's run is held
open inside its transaction, after the engine made (or declined to make) the downstream
run, while another connection pauses or resumes the workflow run: pause must not return
while that ack can still commit a new node run, and resume must start what the ack made
ready. SQLite serialises writers, so a pause cannot fall inside an ack's transaction
there; the race is PostgreSQL's (READ COMMITTED)."""

import threading

import pytest
from django.db import connections

from runs.execution import hooks
from runs.models import AttemptOutcome
from runs.types import Outcome
from tests.conftest import wait_until
from tests.test_workflows_engine import drain, node, start, states
from tests.test_workflows_races import lease_all
from workflows import control, services
from workflows.models import NodeRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def pg_pair(broker, settings):
    if broker.using != "default":
        pytest.skip("SQLite serialises writers: a pause cannot interleave with an ack")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


class HoldAck(hooks.RunListener):
    """Told after the workflows' listener, inside the ack's transaction: holds that
    transaction open (uncommitted) until ``release`` is set. It watches the held run, so
    its ack takes the general path, which tells every listener (runs/execution/hooks.py,
    ack_successes)."""

    def __init__(self, run_id: int):
        self.run_id = run_id
        self.inside = threading.Event()
        self.release = threading.Event()

    def watched(self, run_ids, using):
        return {self.run_id} & set(run_ids)

    def watched_sql(self, run_id):
        return f"{run_id} = {int(self.run_id)}"

    def changed(self, event, run_ids, now, using):
        if event == hooks.SUCCEEDED and self.run_id in run_ids:
            self.inside.set()
            assert self.release.wait(60)


def in_thread(target) -> threading.Thread:
    def run():
        try:
            target()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def waiting_on_a_lock(pid) -> bool:
    if pid is None:
        return False
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row) and row[0] == "Lock"


def b_run(using: str, workflow_run) -> int | None:
    return NodeRun.objects.using(using).get(workflow_run=workflow_run, node__name="b").run_id


def race_control(pair, workflow_run, control_call) -> dict:
    """Ack node a's run and, while the ack's transaction is open, call ``control_call``
    (pause or resume) on another connection; release the ack once the call has
    returned or waits on a lock. Returns what the call returned and b's run as the
    call's connection saw it right after the call returned."""
    lease = lease_all(pair, 1)[0]
    hold = HoldAck(lease.run_id)
    hooks.register(hold)
    seen: dict = {}
    try:
        ack = in_thread(lambda: pair.complete(
            [Outcome(lease, AttemptOutcome.SUCCEEDED, result={"me": "a"})]))
        assert hold.inside.wait(60), "the ack never reached the engine"

        def call():
            with connections[pair.using].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                seen["pid"] = cursor.fetchone()[0]
            seen["returned"] = control_call(workflow_run, using=pair.using)
            seen["b_run_at_return"] = b_run(pair.using, workflow_run)

        caller = in_thread(call)
        wait_until(lambda: "returned" in seen or waiting_on_a_lock(seen.get("pid")),
                   timeout=60, message="the control call to return or wait on a lock")
        hold.release.set()
        ack.join(60)
        caller.join(60)
    finally:
        hold.release.set()
        hooks._listeners.remove(hold)
    return seen


def test_pause_during_an_ack_returns_only_once_no_new_node_run_can_appear(pg_pair):
    wr = start(pg_pair, [node("a"), node("b"), node("c")], [["a", "b"], ["b", "c"]])

    seen = race_control(pg_pair, wr, control.pause_workflow_run)

    assert seen["returned"] is True
    # Whatever the ack made, it had committed before pause returned: nothing new after.
    assert b_run(pg_pair.using, wr) == seen["b_run_at_return"]
    view = services.get_workflow_run(wr.pk, using=pg_pair.using)
    assert view["state"] == "paused"
    # b's run was made before the pause; it runs, and c, which it makes ready, waits.
    b_finishes_paused_then_the_resume_ends_it(pg_pair, wr)


def test_resume_during_an_ack_starts_what_the_ack_made_ready(pg_pair):
    wr = start(pg_pair, [node("a"), node("b")], [["a", "b"]])
    assert control.pause_workflow_run(wr, using=pg_pair.using)

    seen = race_control(pg_pair, wr, control.resume_workflow_run)

    assert seen["returned"] is True
    # a succeeded in the ack, paused; the resume, racing it, must still start b.
    view = services.get_workflow_run(wr.pk, using=pg_pair.using)
    assert (view["state"], states(view)) == ("running", {"a": "succeeded", "b": "running"})
    assert drain(pg_pair, wr)["state"] == "succeeded"


def b_finishes_paused_then_the_resume_ends_it(pg_pair, wr):
    """After a pause that won its race with a's ack (a -> b -> c): b, made before the
    pause, runs; c, which b makes ready, waits with no run; the resume runs it to the
    end."""
    wait_until(lambda: (drain(pg_pair, wr, until=("paused",)) and states(
        services.get_workflow_run(wr.pk, using=pg_pair.using))["b"] == "succeeded"),
        timeout=60, message="b to finish while paused")
    view = services.get_workflow_run(wr.pk, using=pg_pair.using)
    assert (view["state"], states(view)["c"], view["nodes"][2]["run_id"]) == (
        "paused", "pending", None)
    assert control.resume_workflow_run(wr, using=pg_pair.using)
    assert drain(pg_pair, wr)["state"] == "succeeded"
