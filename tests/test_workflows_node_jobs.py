"""A workflow node's job through the jobs' APIs (docs/workflows.md, "Node jobs"): reads
work, every write (pause, resume, cancel, trigger, edit) is refused naming the workflow,
409 over REST, guards.ManagedJob from the Python API and an error message in the admin,
with nothing changed; another tenant still gets 404, as for a missing job. The refusal
is the database's read of the node table, so PostgreSQL is enough."""

import pytest
from django.contrib.auth.models import User

from jobs import services as job_services
from jobs.guards import ManagedJob
from jobs.models import Job
from runs.models import Run
from tests.test_admin import act, text
from tests.test_api_helpers import client_for
from workflows import services

MISSING = 987_654_321
WRITES = [
    ("post", "/api/jobs/{job}/pause/", None),
    ("post", "/api/jobs/{job}/resume/", None),
    ("post", "/api/jobs/{job}/resume/", {"catch_up": "all"}),
    ("post", "/api/jobs/{job}/trigger/", None),
    ("patch", "/api/jobs/{job}/", {"priority": 3}),
    ("patch", "/api/jobs/{job}/", {"payload": {"me": "changed"}}),
    ("delete", "/api/jobs/{job}/", None),
]
READS = ["/api/jobs/{job}/", "/api/jobs/{job}/runs/"]


@pytest.fixture
def bobs(db):
    bob = User.objects.create_user("bob")
    wf = services.create_workflow("etl", [{"name": "extract", "handler": "noop"},
                                          {"name": "load", "handler": "noop"}],
                                  [["extract", "load"]], owner=bob)
    services.trigger(wf)
    load = wf.nodes.get(name="load")
    return {"bob": bob, "wf": wf, "job": load.job_id}


def snapshot():
    return (sorted(Job.objects.values_list("id", "status", "priority", "payload",
                                           "updated_at")),
            sorted(Run.objects.values_list("id", "state")))


def call(client, method, template, body, job):
    path = template.format(job=job)
    return getattr(client, method)(path, body, format="json") if body else \
        getattr(client, method)(path)


@pytest.mark.parametrize("method, template, body", WRITES,
                         ids=[f"{m.upper()} {t}{' +body' if b else ''}" for m, t, b in WRITES])
def test_a_write_to_a_node_job_is_a_409_naming_the_workflow_and_changes_nothing(
        bobs, method, template, body):
    before = snapshot()

    answer = call(client_for(bobs["bob"]), method, template, body, bobs["job"])

    assert answer.status_code == 409, answer.content
    detail = answer.json()["detail"]
    assert f"node 'load' of workflow {bobs['wf'].pk} ('etl')" in detail
    assert "workflow runs instead" in detail
    assert snapshot() == before


@pytest.mark.parametrize("template", READS)
def test_a_node_job_can_still_be_read(bobs, template):
    answer = client_for(bobs["bob"]).get(template.format(job=bobs["job"]))
    assert answer.status_code == 200, answer.content


@pytest.mark.parametrize("method, template, body",
                         [*WRITES, *(("get", t, None) for t in READS)],
                         ids=lambda v: str(v))
def test_another_tenant_gets_404_for_a_node_job_as_for_a_missing_one(
        bobs, method, template, body):
    alice = client_for(User.objects.create_user("alice"))
    before = snapshot()

    theirs = call(alice, method, template, body, bobs["job"])
    missing = call(alice, method, template, body, MISSING)

    assert theirs.status_code == 404, theirs.content
    assert theirs.json() == missing.json()
    assert snapshot() == before
    assert alice.get("/api/jobs/").json()["results"] == []


@pytest.mark.parametrize("call_api", [
    lambda ids: job_services.pause(ids),
    lambda ids: job_services.resume(ids),
    lambda ids: job_services.cancel(ids),
    lambda ids: job_services.trigger(ids[-1]),
    lambda ids: job_services.update_job(ids[-1], {"priority": 1}),
], ids=["pause", "resume", "cancel", "trigger", "update_job"])
def test_the_python_api_refuses_the_whole_call_naming_the_workflow(bobs, call_api):
    plain = job_services.create_job("noop", delay_s=3600)
    before = snapshot()

    with pytest.raises(ManagedJob, match=rf"job {bobs['job']} is node 'load' of workflow "
                                         rf"{bobs['wf'].pk} \('etl'\)") as raised:
        call_api([plain.pk, bobs["job"]])

    assert raised.value.job_id == bobs["job"]
    assert snapshot() == before  # the plain job was not paused or cancelled either


@pytest.mark.parametrize("action", ["pause_jobs", "resume_jobs", "trigger_jobs",
                                    "cancel_jobs"])
def test_the_admins_job_actions_refuse_a_node_job(bobs, admin_client, action):
    before = snapshot()

    # Node jobs are listed (and so acted on) when asked for: kind=node (jobs/node_job_lists.py).
    page = act(admin_client, "/admin/jobs/job/?kind=node", action, [bobs["job"]],
               confirm="yes")

    assert page.status_code == 200
    assert f"node &#x27;load&#x27; of workflow {bobs['wf'].pk}" in text(page)
    assert snapshot() == before


def test_the_admins_job_page_of_a_node_job_is_a_view_and_refuses_a_post(bobs, admin_client):
    url = f"/admin/jobs/job/{bobs['job']}/change/"
    before = snapshot()

    page = admin_client.get(url)
    posted = admin_client.post(url, {"name": "renamed", "priority": 3})

    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()  # no form to save
    assert posted.status_code == 403
    assert snapshot() == before
    assert Job.objects.get(pk=bobs["job"]).name != "renamed"
