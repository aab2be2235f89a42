"""The runs an ack makes are made in the order of their node runs' ids, whatever plan the
readiness read gets: their ids follow that order, and a lease breaks a tie of priority
and run_at by id, so the engine's path and the one-call ack (ORDER BY n.id) hand out the
same runs. With the plan's order instead, what earlier, larger tests left in the
database made tests/test_workflows_ack_paths.py's engine twin lease another of three
runs of equal priority than the one call's twin."""

import pytest
from django.db import connections, transaction

from jobs.registry import handler
from workflows import services
from workflows.execution import ready_pg
from workflows.models import NodeRun

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql_only(
    "the order of a join's rows without ORDER BY is the PostgreSQL plan's")]


@handler("wf.order")
def noop(ctx, payload):
    return None


def test_the_ready_node_runs_come_in_id_order_whatever_the_plan():
    names = ["a", "b", "c"]
    workflow = services.create_workflow(
        "order", [{"name": n, "handler": "wf.order"} for n in ["root", *names]],
        [["root", n] for n in names])
    workflow_run = services.start_workflow_run(workflow)
    runs = NodeRun.objects.filter(workflow_run=workflow_run)
    runs.filter(node__name="root").update(state="succeeded")
    below = list(runs.filter(node__name__in=names).order_by("id").values_list("id", flat=True))
    # A row updated moves to the end of its table's heap: a's now comes after b's and c's
    # in a sequential scan, as rows do after a load of updates.
    runs.filter(pk=below[0]).update(error="")

    with transaction.atomic(), connections["default"].cursor() as cursor:
        for setting in ("indexscan", "bitmapscan", "nestloop", "mergejoin"):
            cursor.execute(f"SET LOCAL enable_{setting} = off")
        rows = ready_pg.ready_rows(below, "default")

    assert [row[0] for row in rows] == below
