"""Owner isolation of the workflows REST API, as the jobs' (tests/test_api_isolation.py):
a hostile second tenant gets 404 for every route on another owner's workflow or
workflow run, exactly as for a missing id, and changes nothing; lists never show them;
the model permissions (view_*, change_*) see and act on everything, view alone is a 403
on acting. And a workflow triggered through the API completes with a real worker."""

import pytest
from django.contrib.auth.models import User

from runs.worker import Worker
from tests.conftest import wait_until
from tests.test_api_helpers import client_for, user_with
from workflows import services
from workflows.models import NodeRun, Workflow, WorkflowRun

MISSING = 987_654_321
# (method, path template, body): {wf} / {wr} are the other owner's ids.
BY_ID = [
    ("get", "/api/workflows/{wf}/", None),
    ("get", "/api/workflows/{wf}/runs/", None),
    ("post", "/api/workflows/{wf}/pause/", None),
    ("post", "/api/workflows/{wf}/resume/", None),
    ("post", "/api/workflows/{wf}/trigger/", None),
    ("post", "/api/workflows/{wf}/trigger/", {"run_key": "mine"}),
    ("get", "/api/workflow-runs/{wr}/", None),
    ("post", "/api/workflow-runs/{wr}/cancel/", None),
    ("post", "/api/workflow-runs/{wr}/pause/", None),
    ("post", "/api/workflow-runs/{wr}/resume/", None),
]
LISTS = ["/api/workflows/", "/api/workflow-runs/"]


@pytest.fixture
def bobs(db):
    bob = User.objects.create_user("bob")
    wf = services.create_workflow("bobs", [{"name": "x", "handler": "noop"},
                                           {"name": "y", "handler": "noop"}],
                                  [["x", "y"]], owner=bob)
    return {"wf": wf, "wr": services.trigger(wf)}


def snapshot():
    return (sorted(Workflow.objects.values_list("id", "status", "updated_at")),
            sorted(WorkflowRun.objects.values_list("id", "state")),
            sorted(NodeRun.objects.values_list("id", "state", "run_id")))


def call(client, method, template, body, wf, wr):
    path = template.format(wf=wf, wr=wr)
    return getattr(client, method)(path, body, format="json") if body else \
        getattr(client, method)(path)


@pytest.mark.parametrize("method, template, body", BY_ID,
                         ids=[f"{m.upper()} {t}{' +body' if b else ''}" for m, t, b in BY_ID])
def test_another_owners_workflow_answers_404_like_a_missing_one_and_changes_nothing(
        bobs, method, template, body):
    alice = client_for(User.objects.create_user("alice"))
    before = snapshot()

    theirs = call(alice, method, template, body, bobs["wf"].pk, bobs["wr"].pk)
    missing = call(alice, method, template, body, MISSING, MISSING)

    assert theirs.status_code == 404, theirs.content
    assert missing.status_code == 404
    assert theirs.json() == missing.json()
    assert snapshot() == before


@pytest.mark.parametrize("path", LISTS)
def test_lists_never_show_another_owners_rows(bobs, path):
    alice = client_for(User.objects.create_user("alice"))

    assert alice.get(path).json()["results"] == []
    assert alice.get(f"/api/workflow-runs/?workflow={bobs['wf'].pk}").json()["results"] == []


def test_the_view_permissions_see_everything_but_acting_needs_change(bobs):
    viewer = client_for(user_with("viewer", "workflows.view_workflow",
                                  "workflows.view_workflowrun"))
    operator = client_for(user_with("operator", "workflows.change_workflow",
                                    "workflows.change_workflowrun"))
    staff = client_for(user_with("staff", is_staff=True))

    seen = viewer.get(f"/api/workflows/{bobs['wf'].pk}/")
    refused = viewer.post(f"/api/workflows/{bobs['wf'].pk}/pause/")
    refused_run = viewer.post(f"/api/workflow-runs/{bobs['wr'].pk}/cancel/")
    paused = operator.post(f"/api/workflows/{bobs['wf'].pk}/pause/")
    cancelled = operator.post(f"/api/workflow-runs/{bobs['wr'].pk}/cancel/")

    assert seen.status_code == 200
    assert refused.status_code == 403 and "workflows.change_workflow" in refused.json()["detail"]
    assert refused_run.status_code == 403
    assert paused.status_code == 200 and cancelled.status_code == 200
    assert staff.get(f"/api/workflows/{bobs['wf'].pk}/").status_code == 404  # is_staff: nothing


def test_nothing_answers_without_a_login(bobs, client):
    for path in [*LISTS, f"/api/workflows/{bobs['wf'].pk}/"]:
        assert client.get(path).status_code == 401


@pytest.mark.parametrize("broker", ["redis", "database-postgresql"], indirect=True)
def test_a_workflow_triggered_through_the_api_completes_with_a_real_worker(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    api = client_for(User.objects.create_user("alice"))
    wf = api.post("/api/workflows/", {
        "name": "diamond",
        "nodes": [{"name": n, "handler": "echo", "payload": {"n": n}} for n in "abcd"],
        "edges": [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]]}, format="json").json()
    run = api.post(f"/api/workflows/{wf['id']}/trigger/").json()

    def finished():
        broker.promote()
        Worker(["default"], concurrency=2, using="default", burst=True).serve()
        view = api.get(f"/api/workflow-runs/{run['id']}/").json()
        return view if view["state"] != "running" else None

    view = wait_until(finished, timeout=60, interval=0.05, message="the workflow run to end")
    assert view["state"] == "succeeded", view
    for node in view["nodes"]:
        assert node["state"] == "succeeded" and node["run_state"] == "succeeded"
        assert node["attempt"] == 1 and node["first_started_at"] and node["finished_at"]
        assert node["first_started_at"] >= node["ready_at"]
    d = next(n for n in view["nodes"] if n["name"] == "d")
    b = next(n for n in view["nodes"] if n["name"] == "b")
    assert d["ready_at"] >= b["finished_at"]
    listed = api.get(f"/api/workflows/{wf['id']}/runs/").json()["results"]
    assert [r["state"] for r in listed] == ["succeeded"]
