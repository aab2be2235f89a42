"""The workflows REST API (docs/api.md, "Workflows"): create (the whole graph, all or
nothing, errors naming the field, node or cycle), list, get, pause, resume, trigger
(idempotent with a run key), a workflow's runs, a workflow run with every node, and
cancel, pause and resume of a workflow run; the responses the schema declares."""

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from jobs.models import Job
from jobs.tenants import set_owner_policy
from workflows.models import NodeRun, Workflow, WorkflowRun

pytestmark = pytest.mark.django_db

DIAMOND = {
    "name": "diamond",
    "nodes": [{"name": "a", "handler": "noop"}, {"name": "b", "handler": "echo"},
              {"name": "c", "handler": "noop", "priority": 3}, {"name": "d", "handler": "noop"}],
    "edges": [["a", "b"], ["a", "c"], {"from": "b", "to": "d"}, ["c", "d"]],
}


def create(api, body=None, **changes):
    response = api.post("/api/workflows/", {**(body or DIAMOND), **changes}, format="json")
    return response


def stored() -> tuple[int, int]:
    return Workflow.objects.count(), Job.objects.count()


def test_create_stores_the_whole_graph_and_answers_it(api, alice):
    response = create(api)

    assert response.status_code == 201, response.content
    body = response.json()
    assert response["Location"] == f"/api/workflows/{body['id']}/"
    assert body["owner"] == "alice" and body["status"] == "active"
    assert body["schedule"] is None and body["next_run_at"] is None
    assert [n["name"] for n in body["nodes"]] == ["a", "b", "c", "d"]
    assert body["edges"] == [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]]
    by_name = {n["name"]: n for n in body["nodes"]}
    assert by_name["d"]["upstream"] == ["b", "c"] and by_name["a"]["upstream"] == []
    assert by_name["c"]["priority"] == 3 and by_name["b"]["handler"] == "echo"
    assert Job.objects.get(pk=by_name["a"]["job"]).owner == alice


def test_a_schedule_is_stored_with_its_next_occurrence(api):
    response = create(api, schedule={"cron": "0 2 * * *", "timezone": "Europe/Berlin"})

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["schedule"]["cron"] == "0 2 * * *"
    assert body["schedule"]["timezone"] == "Europe/Berlin"
    assert body["next_run_at"] is not None


def test_list_and_get_show_only_your_own_workflows(api):
    mine = create(api).json()
    bob = User.objects.create_user("bob")
    from workflows import services
    services.create_workflow("bobs", [{"name": "x", "handler": "noop"}], owner=bob)

    listed = api.get("/api/workflows/").json()
    one = api.get(f"/api/workflows/{mine['id']}/").json()

    assert [w["id"] for w in listed["results"]] == [mine["id"]]
    assert listed["results"][0]["node_count"] == 4
    assert one["edges"] == mine["edges"]


def test_a_cycle_is_refused_naming_its_nodes_and_nothing_is_stored(api):
    before = stored()

    response = create(api, nodes=[{"name": n, "handler": "noop"} for n in "abc"],
                      edges=[["a", "b"], ["b", "c"], ["c", "a"]])

    assert response.status_code == 400
    error = response.json()["edges"][0]
    assert "cycle" in error and all(n in error for n in ("a -> ", "b -> ", "c -> "))
    assert stored() == before


@pytest.mark.parametrize("changes, field, words", [
    ({"edges": [["a", "zz"]]}, "edges[0]", "'zz'"),
    ({"edges": [["a", "a"]]}, "edges[0]", "self-edge"),
    ({"nodes": [{"name": "a", "handler": "noop"}, {"name": "a", "handler": "noop"}],
      "edges": []}, "nodes[1].name", "already the name"),
    ({"nodes": [{"name": "a", "handler": "no.such.handler"}], "edges": []},
     "nodes[0].handler", ""),
    ({"nodes": [{"name": "a", "handler": "noop", "colour": "red"}], "edges": []},
     "nodes[0].colour", "not a node field"),
    ({"nodes": []}, "nodes", ""),
    ({"schedule": "61 * * * *"}, "schedule", ""),
    ({"name": ""}, "name", ""),
    ({"nodes": [{"name": "a", "handler": "noop", "trigger_rule": "always"}], "edges": []},
     "nodes[0].trigger_rule", "all_success, all_done, all_failed, one_success, one_failed, "
                              "none_failed"),
], ids=["unknown node", "self-edge", "duplicate", "handler", "node field", "no nodes",
        "schedule", "name", "trigger rule"])
def test_a_bad_definition_is_a_400_naming_the_field_and_stores_nothing(api, changes, field,
                                                                       words):
    before = stored()

    response = create(api, **changes)

    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert words in " ".join(response.json()[field])
    assert stored() == before


def test_more_nodes_than_the_bound_are_refused(api):
    with override_settings(SCHEDULER={"WORKFLOW_MAX_NODES": 3}):
        response = create(api)

    assert response.status_code == 400
    assert "WORKFLOW_MAX_NODES" in response.json()["nodes"][0]
    assert stored() == (0, 0)


def test_an_unknown_top_level_field_is_refused(api):
    response = create(api, owner="bob")

    assert response.status_code == 400
    assert response.json()["owner"] == ["unknown field"]


@pytest.mark.parametrize("field", ["cron", "timezone"])
def test_a_jobs_schedule_field_at_the_top_level_points_inside_schedule(api, field):
    response = create(api, **{field: "UTC" if field == "timezone" else "0 2 * * *"})

    assert response.status_code == 400
    [reason] = response.json()[field]
    assert f"a workflow's '{field}' goes inside 'schedule'" in reason
    assert stored() == (0, 0)


def test_a_node_on_another_tenants_queue_is_refused(api, alice):
    bob = User.objects.create_user("bob")
    set_owner_policy(bob, queues=["bob-queue"])
    before = stored()

    response = create(api, nodes=[{"name": "a", "handler": "noop", "queue": "bob-queue"}],
                      edges=[])

    assert response.status_code == 400
    assert "nodes[0].queue" in response.json()
    assert stored() == before


def test_pause_resume_and_trigger_a_workflow(api):
    wf = create(api).json()
    base = f"/api/workflows/{wf['id']}"

    paused = api.post(f"{base}/pause/")
    again = api.post(f"{base}/pause/")
    refused = api.post(f"{base}/trigger/")
    resumed = api.post(f"{base}/resume/")
    started = api.post(f"{base}/trigger/")

    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    assert again.status_code == 409 and "paused" in again.json()["detail"]
    assert refused.status_code == 409 and "paused" in refused.json()["detail"]
    assert resumed.status_code == 200 and resumed.json()["status"] == "active"
    assert started.status_code == 201, started.content
    run = started.json()
    assert started["Location"] == f"/api/workflow-runs/{run['id']}/"
    assert run["started_by"] == "trigger" and run["state"] == "running"
    states = {n["name"]: n["state"] for n in run["nodes"]}
    assert states == {"a": "running", "b": "pending", "c": "pending", "d": "pending"}
    a = next(n for n in run["nodes"] if n["name"] == "a")
    assert a["run_id"] and a["attempt"] == 0 and a["ready_at"]


def test_a_trigger_with_a_run_key_is_idempotent(api):
    wf = create(api).json()
    path = f"/api/workflows/{wf['id']}/trigger/"

    first = api.post(path, {"run_key": "2030-01-01"}, format="json")
    second = api.post(path, {"run_key": "2030-01-01"}, format="json")
    bad = api.post(path, {"scheduled_at": "2030-01-01T00:00:00"}, format="json")
    not_an_object = api.post(path, [], format="json")

    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert first.json()["started_by"] == "api" and first.json()["run_key"] == "2030-01-01"
    assert WorkflowRun.objects.count() == 1
    assert bad.status_code == 400 and "scheduled_at" in bad.json()
    assert not_an_object.status_code == 400


def test_a_workflows_runs_and_a_runs_nodes(api):
    wf = create(api).json()
    other = create(api, name="other").json()
    base = f"/api/workflows/{wf['id']}"
    one = api.post(f"{base}/trigger/", {"run_key": "one"}, format="json").json()
    api.post(f"{base}/trigger/", {"run_key": "two"}, format="json")
    api.post(f"/api/workflows/{other['id']}/trigger/")

    of_wf = api.get(f"{base}/runs/").json()
    everything = api.get("/api/workflow-runs/").json()
    filtered = api.get(f"/api/workflow-runs/?workflow={wf['id']}&state=running").json()
    detail = api.get(f"/api/workflow-runs/{one['id']}/").json()

    assert {r["run_key"] for r in of_wf["results"]} == {"one", "two"}
    assert len(everything["results"]) == 3
    assert len(filtered["results"]) == 2
    assert "nodes" not in of_wf["results"][0]
    assert [n["name"] for n in detail["nodes"]] == ["a", "b", "c", "d"]
    assert set(detail["nodes"][0]) >= {"state", "run_id", "run_state", "attempt",
                                       "max_attempts", "ready_at", "first_started_at",
                                       "started_at", "finished_at", "error", "upstream"}
    assert api.get("/api/workflow-runs/?state=nonsense").status_code == 400


def test_pause_resume_and_cancel_a_workflow_run(api):
    wf = create(api).json()
    run = api.post(f"/api/workflows/{wf['id']}/trigger/").json()
    base = f"/api/workflow-runs/{run['id']}"

    paused = api.post(f"{base}/pause/")
    resume_twice = [api.post(f"{base}/resume/"), api.post(f"{base}/resume/")]
    cancelled = api.post(f"{base}/cancel/")
    again = api.post(f"{base}/cancel/")

    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    assert [r.status_code for r in resume_twice] == [200, 409]
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert {n["state"] for n in cancelled.json()["nodes"]} == {"cancelled"}
    assert again.status_code == 409 and "cancelled" in again.json()["detail"]
    assert set(NodeRun.objects.values_list("state", flat=True)) == {"cancelled"}


def test_the_same_idempotency_key_replays_the_created_workflow(api):
    first = api.post("/api/workflows/", DIAMOND, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    second = api.post("/api/workflows/", DIAMOND, format="json", HTTP_IDEMPOTENCY_KEY="k1")

    assert first.status_code == second.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert first.json()["id"] == second.json()["id"] and Workflow.objects.count() == 1


@override_settings(SCHEDULER={"API_THROTTLE_RATE": "3/hour"})
def test_the_workflow_routes_count_against_the_owners_throttle(api):
    answers = [api.get("/api/workflows/").status_code,
               api.post("/api/workflows/", DIAMOND, format="json").status_code,
               api.get("/api/workflow-runs/").status_code,
               api.post("/api/workflows/", DIAMOND, format="json")]

    assert answers[:3] == [200, 201, 200]
    assert answers[3].status_code == 429 and int(answers[3]["Retry-After"]) >= 1
    assert Workflow.objects.count() == 1


def test_delete_cancels_a_workflow_its_live_runs_and_node_jobs_freeing_max_jobs(api, alice):
    """A tenant could not free the max_jobs its node jobs held: a workflow could not be
    deleted (405) nor a node job cancelled (409); an adversary filled the quota so.
    DELETE cancels the workflow for good (docs/workflows.md, "Cancel and pause")."""
    from tests.test_api_helpers import client_for

    set_owner_policy(alice, max_jobs=4)
    wf = create(api).json()
    base = f"/api/workflows/{wf['id']}"
    run = api.post(f"{base}/trigger/").json()
    assert create(api, name="second").status_code == 403  # 4 node jobs held already
    bob = client_for(User.objects.create_user("bob"))
    assert bob.delete(f"{base}/").status_code == 404

    deleted = api.delete(f"{base}/")
    again = api.delete(f"{base}/")

    assert deleted.status_code == 200 and deleted.json()["status"] == "cancelled"
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    shown = api.get(f"/api/workflow-runs/{run['id']}/").json()
    assert shown["state"] == "cancelled"
    assert {n["state"] for n in shown["nodes"]} == {"cancelled"}
    assert set(Job.objects.filter(workflow_node__workflow_id=wf["id"])
               .values_list("status", flat=True)) == {"cancelled"}
    assert api.post(f"{base}/trigger/").status_code == 409
    assert api.post(f"{base}/resume/").status_code == 409
    assert create(api, name="second").status_code == 201  # the quota is free again


def test_a_retry_of_a_dead_node_of_a_cancelled_workflow_says_it_cannot_run_again(api):
    """The 409 said "resume the job first", which a node job of a cancelled workflow
    cannot be (a 409 of its own)."""
    from runs.models import Run

    wf = create(api, {"name": "one", "nodes": [{"name": "a", "handler": "noop"}]}).json()
    api.post(f"/api/workflows/{wf['id']}/trigger/")
    run = Run.objects.get(job__workflow_node__workflow_id=wf["id"])
    Run.objects.filter(pk=run.pk).update(state="dead")  # as if its attempts were used up
    assert api.delete(f"/api/workflows/{wf['id']}/").status_code == 200
    Run.objects.filter(pk=run.pk).update(state="dead")

    answer = api.post(f"/api/runs/{run.pk}/retry/")

    assert answer.status_code == 409
    assert answer.json()["detail"] == f"run {run.pk}'s job is cancelled: its runs cannot run again"
