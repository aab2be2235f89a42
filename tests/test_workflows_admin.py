"""The workflows in the admin (docs/admin.md, "Workflows") through Django's test client:
the workflow run's page draws its graph (inline SVG: a box per node coloured by state,
an arrow per edge, each node linked to its run's page, nothing fetched from outside), the
workflow's page its definition, the dead letter names the workflow run a dead run holds
up, and the model permissions decide who sees and acts."""

import re

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from runs.models import Run, RunState
from tests.test_api_helpers import user_with
from workflows import services
from workflows.admin.graph_svg import layers, positions
from workflows.models import MapItem, NodeRun, NodeState, Workflow, WorkflowRun

pytestmark = pytest.mark.django_db

NODES = [{"name": n, "handler": "noop"} for n in ("extract", "left", "right", "load")]
EDGES = [["extract", "left"], ["extract", "right"], ["left", "load"], ["right", "load"]]


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def diamond():
    """A diamond whose first node died: its run is dead, the node failed, the others
    upstream_failed, the workflow run failed (set directly: this is test setup)."""
    wf = services.create_workflow("nightly etl", NODES, EDGES,
                                  owner=User.objects.create_user("alice"))
    wr = services.trigger(wf)
    first = NodeRun.objects.get(workflow_run=wr, node__name="extract")
    Run.objects.filter(pk=first.run_id).update(state=RunState.DEAD, error="boom",
                                               finished_at=timezone.now(), attempt=1)
    NodeRun.objects.filter(pk=first.pk).update(state=NodeState.FAILED)
    NodeRun.objects.filter(workflow_run=wr).exclude(pk=first.pk).update(
        state=NodeState.UPSTREAM_FAILED, error="upstream 'extract' failed")
    WorkflowRun.objects.filter(pk=wr.pk).update(state="failed")
    return {"wf": wf, "wr": wr, "dead": first.run_id}


def test_the_workflow_run_page_draws_the_graph_coloured_by_state(admin_client, diamond):
    page = admin_client.get(f"/admin/workflows/workflowrun/{diamond['wr'].pk}/change/")

    assert page.status_code == 200
    html = page.content.decode()
    start = html.index('<svg xmlns="http://www.w3.org/2000/svg" class="workflow-graph"')
    svg = html[start:html.index("</svg>", start)]
    assert svg.count('class="wf-node wf-failed"') == 1
    assert svg.count('class="wf-node wf-upstream_failed"') == 3
    assert svg.count('marker-end="url(#wf-arrow)"') == len(EDGES)
    assert f'href="/admin/runs/run/{diamond["dead"]}/change/"' in svg
    assert re.findall(r'(?:href|src)="(?:https?:)?//', html) == []  # nothing from outside
    assert "upstream &#x27;extract&#x27; failed" in html or "upstream 'extract' failed" in html


def test_the_workflow_page_draws_the_definition_and_lists_its_runs(admin_client, diamond):
    page = text(admin_client.get(f"/admin/workflows/workflow/{diamond['wf'].pk}/change/"))

    assert page.count('class="wf-node wf-definition"') == len(NODES)
    assert f"/admin/workflows/workflowrun/{diamond['wr'].pk}/change/" in page
    listing = text(admin_client.get("/admin/workflows/workflow/"))
    assert "nightly etl" in listing and "trigger only" in listing


def test_the_dead_letter_links_a_dead_run_to_the_workflow_run_it_holds_up(admin_client,
                                                                          diamond):
    listing = text(admin_client.get("/admin/runs/deadrun/"))
    page = text(admin_client.get(f"/admin/runs/deadrun/{diamond['dead']}/change/"))

    link = f'href="/admin/workflows/workflowrun/{diamond["wr"].pk}/change/"'
    assert link in listing and f"holds up</span> <a {link}>workflow run {diamond['wr'].pk}<" \
        in listing
    assert link in page


def test_the_workflow_run_list_shows_progress(admin_client, diamond):
    listing = text(admin_client.get("/admin/workflows/workflowrun/"))

    assert "0 / 4" in listing and "wf-state-failed" in listing


def test_viewing_needs_the_view_permission_and_actions_the_change_permission(client, diamond):
    nobody = user_with("nobody", is_staff=True)
    viewer = user_with("viewer", "workflows.view_workflowrun", is_staff=True)
    url = f"/admin/workflows/workflowrun/{diamond['wr'].pk}/change/"

    client.force_login(nobody)
    assert client.get(url).status_code == 403
    client.force_login(viewer)
    listing = text(client.get("/admin/workflows/workflowrun/"))
    assert client.get(url).status_code == 200
    assert "cancel_workflow_runs" not in listing


def test_an_operator_pauses_resumes_and_cancels_a_workflow_run(client):
    wf = services.create_workflow("wf", NODES, EDGES)
    wr = services.trigger(wf)
    operator = user_with("op", "workflows.view_workflowrun", "workflows.change_workflowrun",
                         is_staff=True)
    client.force_login(operator)
    url = "/admin/workflows/workflowrun/"
    act = {"_selected_action": [str(wr.pk)]}

    client.post(url, {"action": "pause_workflow_runs", **act})
    paused = WorkflowRun.objects.get(pk=wr.pk).state
    client.post(url, {"action": "resume_workflow_runs", **act})
    resumed = WorkflowRun.objects.get(pk=wr.pk).state
    confirm = client.post(url, {"action": "cancel_workflow_runs", **act})
    client.post(url, {"action": "cancel_workflow_runs", "confirm": "yes", **act})

    assert (paused, resumed) == ("paused", "running")
    assert "Cancel 1 workflow run?" in text(confirm)
    assert WorkflowRun.objects.get(pk=wr.pk).state == "cancelled"


def test_an_operator_pauses_and_triggers_a_workflow(client):
    wf = services.create_workflow("wf", NODES, EDGES)
    client.force_login(user_with("op", "workflows.view_workflow", "workflows.change_workflow",
                                 is_staff=True))
    act = {"_selected_action": [str(wf.pk)]}

    client.post("/admin/workflows/workflow/", {"action": "pause_workflows", **act})
    refused = text(client.post("/admin/workflows/workflow/",
                               {"action": "trigger_workflows", **act}, follow=True))
    client.post("/admin/workflows/workflow/", {"action": "resume_workflows", **act})
    client.post("/admin/workflows/workflow/", {"action": "trigger_workflows", **act})

    assert "left alone" in refused
    assert WorkflowRun.objects.filter(workflow=wf).count() == 1


def test_an_operator_cancels_a_workflow_after_a_confirmation(client):
    wf = services.create_workflow("wf", NODES, EDGES)
    wr = services.trigger(wf)
    client.force_login(user_with("op", "workflows.view_workflow", "workflows.change_workflow",
                                 is_staff=True))
    act = {"_selected_action": [str(wf.pk)]}

    confirm = client.post("/admin/workflows/workflow/", {"action": "cancel_workflows", **act})
    unchanged = Workflow.objects.get(pk=wf.pk).status
    client.post("/admin/workflows/workflow/",
                {"action": "cancel_workflows", "confirm": "yes", **act})

    assert "Cancel 1 workflow?" in text(confirm) and unchanged == "active"
    assert Workflow.objects.get(pk=wf.pk).status == "cancelled"
    assert WorkflowRun.objects.get(pk=wr.pk).state == "cancelled"


def test_the_layout_puts_every_node_right_of_its_upstreams():
    keys = ["a", "b", "c", "d", "e"]
    edges = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("a", "d"), ("d", "e")]

    layer = layers(keys, edges)
    place = positions(keys, edges)

    assert layer == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}
    assert all(place[up][0] < place[down][0] for up, down in edges)
    assert len(set(place.values())) == len(keys)


def test_the_graph_shows_a_trigger_rule_only_when_not_the_default(admin_client):
    wf = services.create_workflow("graph", [{"name": "a", "handler": "noop"}, {
        "name": "tidy", "handler": "noop", "trigger_rule": "all_done"}], [["a", "tidy"]])
    wr = services.trigger(wf)

    for url in (f"/admin/workflows/workflow/{wf.pk}/change/",
                f"/admin/workflows/workflowrun/{wr.pk}/change/"):
        html = admin_client.get(url).content.decode()
        start = html.index('class="workflow-graph"')
        svg = html[start:html.index("</svg>", start)]
        boxes = dict(re.findall(r"<title>(\w+)[^<]*</title>(.*?)</g>", svg))
        assert "all_done" in boxes["tidy"] and 'stroke-dasharray' in boxes["tidy"], url
        assert "<th>trigger rule</th>" in html, url
        assert "all_success" not in boxes["a"] and 'stroke-dasharray' not in boxes["a"], url


def test_the_graph_draws_a_mapped_node_as_one_box_with_its_items_counts(admin_client):
    wf = services.create_workflow("mapped", [
        {"name": "root", "handler": "noop"}, {"name": "each", "handler": "noop", "map": "root"}])
    wr = services.trigger(wf)
    each = NodeRun.objects.get(workflow_run=wr, node__name="each")
    NodeRun.objects.filter(pk=each.pk).update(state=NodeState.RUNNING, items=3)  # test setup
    MapItem.objects.bulk_create([MapItem(node_run=each, index=i, run_id=10_000 + i, state=s)
                                 for i, s in enumerate(["succeeded", "succeeded", "running"])])

    html = admin_client.get(f"/admin/workflows/workflowrun/{wr.pk}/change/").content.decode()

    start = html.index('class="workflow-graph"')
    svg = html[start:html.index("</svg>", start)]
    boxes = dict(re.findall(r"<title>(\w+)[^<]*</title>(.*?)</g>", svg))
    assert set(boxes) == {"root", "each"}
    assert "running · 2/3 items" in boxes["each"]


def test_the_graph_draws_a_sub_workflow_node_linked_to_its_child_run(admin_client):
    child_wf = services.create_workflow("inner", [{"name": "a", "handler": "noop"},
                                                  {"name": "b", "handler": "noop"}])
    wf = services.create_workflow("outer", [
        {"name": "sub", "workflow": "inner"}, {"name": "tidy", "handler": "noop",
                                               "trigger_rule": "all_done"},
        {"name": "each", "handler": "noop", "map": "tidy"}], [["sub", "tidy"]])
    wr = services.trigger(wf)  # sub is a root: its child starts with the run
    child = WorkflowRun.objects.get(workflow=child_wf)

    html = admin_client.get(f"/admin/workflows/workflowrun/{wr.pk}/change/").content.decode()
    start = html.index('class="workflow-graph"')
    svg = html[start:html.index("</svg>", start)]
    boxes = dict(re.findall(r"<title>(\w+)[^<]*</title>(.*?)</g>", svg))
    assert "running · 0/2 nodes" in boxes["sub"], boxes["sub"]
    assert f'href="/admin/workflows/workflowrun/{child.pk}/change/"' in svg
    assert 'class="wf-node wf-running wf-workflow"' in svg
    assert 'class="wf-node wf-pending wf-map"' in svg  # a mapped node: a stack of boxes
    assert "all_done" in boxes["tidy"]

    html = admin_client.get(f"/admin/workflows/workflow/{wf.pk}/change/").content.decode()
    start = html.index('class="workflow-graph"')
    svg = html[start:html.index("</svg>", start)]
    assert "workflow inner" in svg
    assert f'workflow <a href="/admin/workflows/workflow/{child_wf.pk}/change/">inner</a>' \
        in html  # the nodes table names the workflow a sub-workflow node runs
    assert f'href="/admin/workflows/workflow/{child_wf.pk}/change/"' in svg

    html = admin_client.get(f"/admin/workflows/workflowrun/{child.pk}/change/").content.decode()
    assert f'href="/admin/workflows/workflowrun/{wr.pk}/change/">sub of workflow run' in html
    html = admin_client.get(f"/admin/workflows/workflowrun/{wr.pk}/change/").content.decode()
    assert f">workflow run #{child.pk}</a>" in html  # the nodes table links the child
