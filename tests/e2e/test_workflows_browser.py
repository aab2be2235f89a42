"""A workflow run's admin page in Debian's chromium (docs/admin.md, "Workflows"): the graph
is drawn (a box per node, coloured by its state, an arrow per edge), fits a 1366 px
window with the sidebar open, and a click on a node opens its run's page. A screenshot
is kept in the test's tmp_path for a reader of a failure."""

import pytest
from django.utils import timezone

from runs.models import Run, RunState
from workflows import services
from workflows.models import NodeRun, NodeState, WorkflowRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NODES = [{"name": n, "handler": "noop"} for n in
         ("extract_orders", "extract_customers", "join", "report", "archive")]
EDGES = [["extract_orders", "join"], ["extract_customers", "join"], ["join", "report"],
         ["extract_orders", "archive"]]


def test_the_workflow_run_page_draws_a_readable_graph_linked_to_the_runs(page, tmp_path):
    wf = services.create_workflow("nightly etl", NODES, EDGES)
    wr = services.trigger(wf)
    first = NodeRun.objects.get(workflow_run=wr, node__name="extract_orders")
    Run.objects.filter(pk=first.run_id).update(state=RunState.SUCCEEDED, attempt=1,
                                               started_at=timezone.now(),
                                               finished_at=timezone.now())
    NodeRun.objects.filter(pk=first.pk).update(state=NodeState.SUCCEEDED)

    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(f"/admin/workflows/workflowrun/{wr.pk}/change/")
    page.screenshot(path=tmp_path / "workflow-run.png", full_page=True)

    graph = page.locator("svg.workflow-graph")
    assert graph.is_visible()
    assert page.locator("svg.workflow-graph g.wf-node").count() == len(NODES)
    assert page.locator("svg.workflow-graph g.wf-succeeded").count() == 1
    assert page.locator("svg.workflow-graph g.wf-running").count() == 1
    assert page.locator("svg.workflow-graph path[marker-end]").count() == len(EDGES)
    box = graph.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 1366, box
    page.locator("svg.workflow-graph a").first.click()
    page.wait_for_url(f"**/admin/runs/run/{first.run_id}/change/")
    assert WorkflowRun.objects.get(pk=wr.pk).state == "running"
