"""A failed node run says why its run failed (workflows/execution/failures.py, why_failed): the
last line of the run's error after "its run went to the dead letter", so the workflow
run's page and API show the cause without a request to the run (a new user's report:
the cause was one request further on)."""

import pytest

from jobs.registry import handler
from runs.worker import Worker
from workflows import services
from workflows.execution.failures import CAUSE_MAX, why_failed
from workflows.models import NodeRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("cause.fail")
def fail(ctx, payload):
    raise ValueError("the upstream API said 503")


def test_a_failed_node_run_names_its_runs_last_error(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    workflow = services.create_workflow(
        "cause", [{"name": "a", "handler": "cause.fail", "max_attempts": 1},
                  {"name": "b", "handler": "cause.fail"}], [["a", "b"]], using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    broker.promote()
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    errors = dict(NodeRun.objects.using(broker.using).filter(workflow_run=workflow_run)
                  .values_list("node__name", "error"))
    assert errors["a"] == ("its run went to the dead letter: "
                           "ValueError: the upstream API said 503")
    assert "upstream" in errors["b"] and "'a'" in errors["b"]


def test_the_cause_is_the_last_line_and_bounded():
    assert why_failed("") == "its run went to the dead letter"
    assert why_failed("Traceback (most recent call last):\n  File x\nKeyError: 'k'\n\n") == (
        "its run went to the dead letter: KeyError: 'k'")
    long = why_failed("x" * 1000)
    assert len(long) == len("its run went to the dead letter: ") + CAUSE_MAX
    assert long.endswith("…")
