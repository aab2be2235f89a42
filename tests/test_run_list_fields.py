"""What the run and workflow lists show: a requeued run keeps no trace of its last
attempt's worker while queued (its attempts do), a paused or cancelled workflow shows no
next run, and an ``ordering`` the list cannot sort by is a 400 listing the ones it can."""

import pytest

from runs.models import Run
from tests.test_api_helpers import finished_run, recurring
from workflows import control
from workflows.services import create_workflow

pytestmark = pytest.mark.django_db


def test_a_requeued_run_clears_the_last_attempts_worker_and_start(api, alice):
    run = finished_run(recurring(alice))
    Run.objects.filter(pk=run.pk).update(worker_id="host:1")

    retried = api.post(f"/api/runs/{run.pk}/retry/")
    shown = api.get(f"/api/runs/{run.pk}/").json()

    assert retried.status_code == 200, retried.content
    assert (shown["state"], shown["worker_id"], shown["started_at"]) == ("scheduled", "",
                                                                         None)
    [attempt] = shown["attempts"]
    assert attempt["worker_id"] == "host:1" and attempt["started_at"] is not None


@pytest.mark.parametrize("stop", [control.pause_workflow, control.cancel_workflow])
def test_a_paused_or_cancelled_workflow_shows_no_next_run(api, alice, stop):
    workflow = create_workflow("nightly", [{"name": "a", "handler": "noop"}], owner=alice,
                               schedule="@daily")
    assert api.get(f"/api/workflows/{workflow.pk}/").json()["next_run_at"] is not None

    stop(workflow)

    assert api.get(f"/api/workflows/{workflow.pk}/").json()["next_run_at"] is None
    [listed] = api.get("/api/workflows/").json()["results"]
    assert listed["next_run_at"] is None


@pytest.mark.parametrize("path", ["/api/runs/", "/api/jobs/"])
def test_an_unknown_ordering_is_a_400_listing_the_allowed_ones(api, alice, path):
    recurring(alice)

    refused = api.get(path, {"ordering": "-started_at"})
    fine = api.get(path, {"ordering": "-id"})

    assert refused.status_code == 400
    reason = refused.json()["ordering"][0]
    assert "'-started_at'" in reason and "created_at" in reason and "id" in reason
    assert fine.status_code == 200


def test_the_admin_workflow_list_shows_no_next_run_for_a_paused_workflow(admin_client,
                                                                        alice):
    workflow = create_workflow("nightly", [{"name": "a", "handler": "noop"}], owner=alice,
                               schedule="@daily")
    control.pause_workflow(workflow)

    page = admin_client.get("/admin/workflows/workflow/")

    assert page.status_code == 200
    [row] = page.context["cl"].result_list
    assert page.context["cl"].model_admin.next_run(row) == "-"
