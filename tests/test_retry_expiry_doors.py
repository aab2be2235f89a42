"""The retry strategy and expiry fields at the ways in jobs/spec.py gives them beyond REST
and the Python API (tests/test_expiry.py has those): the admin's create form, ``@task``
options and workflow nodes, each storing what it was given and refusing a bad value
naming the field."""

import pytest
from django.tasks import TaskResultStatus, task
from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from jobs.models import Job
from runs.models import Run, RunState
from workflows import services as workflows
from workflows.validation import InvalidWorkflow

pytestmark = pytest.mark.django_db

STRATEGY = {"kind": "fixed", "base_s": 5.0, "retry_on": ["TimeoutError"]}


@task(retry=STRATEGY, expires_in_s=120)
def fenced_task():
    return None


def plain():
    return None


def test_a_task_stores_its_retry_and_expiry_on_each_runs_job():
    result = fenced_task.enqueue()

    job = Job.objects.get(runs__pk=int(result.id))
    assert (job.retry, job.expires_in_s) == (STRATEGY, 120)


def test_a_task_whose_run_expired_reads_failed():
    result = fenced_task.enqueue()
    Run.objects.filter(pk=int(result.id)).update(state=RunState.EXPIRED,
                                                 finished_at=timezone.now())

    result.refresh()

    assert result.status == TaskResultStatus.FAILED


def test_a_task_with_a_bad_strategy_is_refused_naming_the_field():
    with pytest.raises(InvalidTask, match="retry: kind: give one of"):
        task(retry={"kind": "random"})(plain)
    with pytest.raises(InvalidTask, match="expires_in_s must be a whole number"):
        task(expires_in_s=0)(plain)


def test_the_admin_creates_a_job_with_a_strategy_and_an_expiry(admin_client):
    form = {"name": "otp", "handler": "noop", "payload": "{}", "misfire_policy": "run_once",
            "queue": "default", "priority": "5", "timeout_s": "60", "max_attempts": "3",
            "retry": '{"kind": "linear", "base_s": 2}', "expires_in_s": "600"}

    admin_client.post("/admin/jobs/job/add/", form)

    job = Job.objects.get(name="otp")
    assert (job.retry, job.expires_in_s) == ({"kind": "linear", "base_s": 2.0}, 600)
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "linear" in page


def test_the_admin_refuses_a_bad_strategy_on_its_field(admin_client):
    form = {"name": "bad", "handler": "noop", "payload": "{}", "misfire_policy": "run_once",
            "queue": "default", "priority": "5", "timeout_s": "60", "max_attempts": "3",
            "retry": '{"cap_s": -1}'}

    page = admin_client.post("/admin/jobs/job/add/", form).content.decode()

    assert "cap_s: give a number of seconds" in page
    assert not Job.objects.filter(name="bad").exists()


def test_a_workflow_node_takes_retry_and_expires_in_s():
    workflow = workflows.create_workflow(
        "w", [{"name": "a", "handler": "noop", "retry": STRATEGY, "expires_in_s": 30}], [])

    job = workflow.nodes.get(name="a").job
    assert (job.retry, job.expires_in_s) == (STRATEGY, 30)


def test_a_workflow_node_refuses_a_bad_expiry_naming_the_node_and_field():
    with pytest.raises(InvalidWorkflow) as caught:
        workflows.create_workflow(
            "w", [{"name": "a", "handler": "noop", "expires_in_s": 0},
                  {"name": "b", "handler": "noop", "expires_at": "2030-01-01T00:00:00Z"}],
            [])

    assert caught.value.errors["nodes[0].expires_in_s"].startswith("must be an integer from 1")
    assert "is not a node field" in caught.value.errors["nodes[1].expires_at"]
