"""Pause of a workflow racing a trigger of it, on PostgreSQL (docs/workflows.md, "Cancel
and pause": a paused workflow's trigger is refused until resumed). The trigger is held
inside its transaction after it read the workflow ``active`` (on the owner's quota lock,
taken by another connection), while another connection pauses the workflow: once the
pause has returned, no workflow run of it may appear."""

import threading

import pytest
from django.db import connections, transaction

from runs.tenancy.quotas import MAX_INT, QUOTA_LOCK
from tests.conftest import wait_until
from tests.test_workflows_engine import node
from tests.test_workflows_pause_race import in_thread, waiting_on_a_lock
from workflows import control, services
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)


def test_no_workflow_run_appears_once_a_pause_of_the_workflow_has_returned(alice):
    wf = services.create_workflow("wf", [node("a"), node("b")], [["a", "b"]], owner=alice)
    holding, release = threading.Event(), threading.Event()
    seen: dict = {}

    def quota_holder():
        with transaction.atomic():
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                               [QUOTA_LOCK, alice.pk % MAX_INT])
            holding.set()
            assert release.wait(60)

    def pid(key):
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            seen[key] = cursor.fetchone()[0]

    def trigger():
        pid("trigger_pid")
        try:
            services.trigger(wf)
            seen["triggered"] = True
        except Exception as exc:  # noqa: BLE001 - a refusal is an allowed outcome
            seen["triggered"] = exc

    def pause():
        pid("pause_pid")
        seen["paused"] = control.pause_workflow(wf)
        seen["runs_at_pause"] = WorkflowRun.objects.filter(workflow=wf).count()

    threads = [in_thread(quota_holder)]
    try:
        assert holding.wait(60)
        threads.append(in_thread(trigger))
        wait_until(lambda: waiting_on_a_lock(seen.get("trigger_pid")), timeout=60,
                   message="the trigger to wait on the owner's quota lock")
        threads.append(in_thread(pause))
        wait_until(lambda: "paused" in seen or waiting_on_a_lock(seen.get("pause_pid")),
                   timeout=60, message="the pause to return or wait on a lock")
    finally:
        release.set()
        for thread in threads:
            thread.join(60)

    assert seen["paused"] is True
    # Either the trigger's run was made before the pause returned, or it was refused.
    assert WorkflowRun.objects.filter(workflow=wf).count() == seen["runs_at_pause"]
