"""The acks of a workflow run's last two node runs, in two transactions at once, end the
workflow run (docs/workflows.md, "The rules"). Each ack asked whether any node was still
pending or running without holding the workflow run: each saw the other's node running
(not yet committed), neither ended it, and it stayed ``running`` until a reconcile. Seen
as two workers' children acking a workflow's last two nodes at once
(test_workflows_trigger_rules.py timing out in CI)."""

import threading
import time

import pytest
from django.db import connections, transaction

from runs.models import AttemptOutcome
from runs.types import Outcome
from tests.test_workflows_engine import node
from tests.test_workflows_races import lease_all, pair  # noqa: F401 (a fixture)
from workflows import services
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

HOLD_S = 1.0  # how long the first ack's transaction stays open beside the second


def test_the_last_two_nodes_acked_at_once_end_the_workflow_run(pair):  # noqa: F811
    if connections[pair.using].vendor != "postgresql":
        pytest.skip("SQLite serialises the two writers")
    wf = services.create_workflow("two-leaves", [node("x"), node("y")], [], using=pair.using)
    wr = services.start_workflow_run(wf, using=pair.using)
    first, second = lease_all(pair, 2)
    errors = []

    def ack_second():
        try:
            # Outside a transaction: the one-call ack on PostgreSQL (ack_pg.py).
            pair.complete([Outcome(second, AttemptOutcome.SUCCEEDED)])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=ack_second)
    # Inside the caller's transaction: the engine's path (ack.py, finish_if_done).
    with transaction.atomic(using=pair.using):
        pair.complete([Outcome(first, AttemptOutcome.SUCCEEDED)])
        thread.start()
        time.sleep(HOLD_S)
    thread.join(60)
    assert not thread.is_alive() and not errors, errors
    state = WorkflowRun.objects.using(pair.using).get(pk=wr.pk).state
    assert state == "succeeded", state
