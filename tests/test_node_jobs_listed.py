"""A workflow's node jobs told apart in the job lists (jobs/node_job_lists.py; docs/api.md,
"List and read"): left out of the plain REST and admin lists unless asked, carrying their
workflow's id, and ``active`` (not ``finished``) before the workflow's first run."""

import pytest

from jobs.models import Job
from tests.test_api_helpers import recurring
from workflows.services import create_workflow

pytestmark = pytest.mark.django_db


@pytest.fixture
def flow(alice):
    """A plain cron job of alice's and a two-node workflow of hers, never run."""
    plain = recurring(alice)
    workflow = create_workflow("etl", [{"name": "extract", "handler": "noop"},
                                       {"name": "load", "handler": "noop"}],
                               [["extract", "load"]], owner=alice, schedule="@daily")
    return plain, workflow


def ids(response):
    assert response.status_code == 200, response.content
    return sorted(job["id"] for job in response.json()["results"])


def test_the_plain_job_list_leaves_node_jobs_out_unless_asked(api, flow):
    plain, workflow = flow
    nodes = sorted(workflow.nodes.values_list("job_id", flat=True))

    assert ids(api.get("/api/jobs/")) == [plain.pk]
    assert ids(api.get("/api/jobs/", {"nodes": "include"})) == sorted([plain.pk, *nodes])
    assert ids(api.get("/api/jobs/", {"nodes": "only"})) == nodes
    assert ids(api.get("/api/jobs/", {"workflow": workflow.pk})) == nodes
    assert ids(api.get("/api/jobs/", {"workflow": workflow.pk + 1})) == []


def test_a_node_job_names_its_workflow_and_reads_active_before_its_first_run(api, flow):
    plain, workflow = flow
    node_job = workflow.nodes.get(name="load").job_id

    shown = api.get(f"/api/jobs/{node_job}/").json()
    listed = api.get("/api/jobs/", {"nodes": "only"}).json()["results"]

    assert (shown["workflow"], shown["status"]) == (workflow.pk, "active")
    assert {job["status"] for job in listed} == {"active"}
    assert api.get("/api/jobs/", {"nodes": "only", "status": "finished"}).json()[
        "results"] == []
    assert api.get(f"/api/jobs/{plain.pk}/").json()["workflow"] is None


def test_the_admin_job_list_shows_node_jobs_only_when_asked(admin_client, flow):
    plain, workflow = flow
    nodes = set(workflow.nodes.values_list("job_id", flat=True))

    def listed(**params):
        response = admin_client.get("/admin/jobs/job/", params)
        assert response.status_code == 200
        return {job.pk for job in response.context["cl"].result_list}

    assert listed() == {plain.pk}
    assert listed(kind="node") == nodes
    assert listed(kind="all") == nodes | {plain.pk}
    assert Job.objects.count() == 3
