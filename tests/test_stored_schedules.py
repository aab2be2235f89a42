"""Timezones whose meaning depends on the host are refused, and schedules stored before a
rule or a tz database change (rows planted here; the API refuses them) are a 400
naming the stored field, or shown on the admin page, not a 500 (jobs/schedules/zones.py)."""

import pytest

from jobs import services
from jobs.models import Job, Schedule
from tests.test_admin import act, text
from workflows import control
from workflows import services as workflow_services
from workflows.models import Workflow

pytestmark = pytest.mark.django_db

MINUTELY = {"handler": "noop", "cron": "* * * * *"}


def post(api, path, body):
    return api.post(path, body, format="json")


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posixrules", "right/UTC",
                                  "Mars/Phobos"])
def test_a_host_dependent_or_unknown_timezone_is_refused(api, zone):
    job = post(api, "/api/jobs/", {**MINUTELY, "timezone": zone})
    bulk = post(api, "/api/jobs/bulk/", {"jobs": [{**MINUTELY, "timezone": zone}]})
    workflow = post(api, "/api/workflows/", {
        "name": "w", "nodes": [{"name": "a", "handler": "noop"}],
        "schedule": {"cron": "* * * * *", "timezone": zone}})
    with pytest.raises(services.InvalidJob) as python:
        services.create_job("noop", cron="* * * * *", timezone=zone)

    assert job.status_code == 400 and set(job.json()) == {"timezone"}, job.content
    assert bulk.status_code == 400 and set(bulk.json()["errors"][0]["errors"]) == {"timezone"}
    assert workflow.status_code == 400 and set(workflow.json()) == {"schedule.timezone"}
    assert set(python.value.errors) == {"timezone"}
    assert not Job.objects.exists() and not Workflow.objects.exists()


def plant(model, pk: int, **fields) -> None:
    """Store what the API refuses, as a row saved before a rule or a tz database change."""
    model.objects.filter(pk=pk).update(**fields)


def test_resuming_a_job_whose_stored_timezone_is_gone_is_a_400_naming_timezone(api):
    job = post(api, "/api/jobs/", MINUTELY).json()
    assert post(api, f"/api/jobs/{job['id']}/pause/", {}).status_code == 200
    plant(Schedule, Job.objects.get(pk=job["id"]).schedule_id, timezone="Mars/Phobos")

    answer = post(api, f"/api/jobs/{job['id']}/resume/", {})

    assert answer.status_code == 400, answer.content
    assert set(answer.json()) == {"timezone"}
    assert "Mars/Phobos" in answer.json()["timezone"][0] and "edit" in answer.content.decode()
    assert Job.objects.get(pk=job["id"]).status == Job.Status.PAUSED


def test_resuming_a_workflow_whose_stored_cron_no_longer_reads_is_a_400(api):
    created = post(api, "/api/workflows/", {"name": "w", "nodes": [
        {"name": "a", "handler": "noop"}], "schedule": {"cron": "* * * * *"}})
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    assert post(api, f"/api/workflows/{pk}/pause/", {}).status_code == 200
    plant(Schedule, Workflow.objects.get(pk=pk).schedule_id, cron="61 99 * * *")

    answer = post(api, f"/api/workflows/{pk}/resume/", {})

    assert answer.status_code == 400, answer.content
    assert set(answer.json()) == {"schedule.cron"}
    assert Workflow.objects.get(pk=pk).status == Workflow.Status.PAUSED


def test_the_admin_job_page_shows_a_stored_timezone_that_is_gone(admin_client, admin_user):
    job = services.create_job("noop", cron="* * * * *", owner=admin_user)
    plant(Schedule, job.schedule_id, timezone="Mars/Phobos")

    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/")

    assert page.status_code == 200
    assert "the stored timezone &#x27;Mars/Phobos&#x27; is not in this host" in \
        page.content.decode()


def test_the_admin_resume_actions_name_a_stored_schedule_that_no_longer_reads(
        admin_client, admin_user):
    job = services.create_job("noop", cron="* * * * *", owner=admin_user)
    services.pause([job.pk])
    plant(Schedule, job.schedule_id, timezone="Mars/Phobos")
    workflow = services_workflow(admin_user)
    plant(Schedule, workflow.schedule_id, cron="61 99 * * *")

    jobs_page = text(act(admin_client, "/admin/jobs/job/", "resume_jobs", [job.pk]))
    flows_page = text(act(admin_client, "/admin/workflows/workflow/", "resume_workflows",
                          [workflow.pk]))

    assert "Nothing was resumed: timezone: the stored timezone" in jobs_page
    assert f"Workflow {workflow.pk} was not resumed: schedule.cron: the stored cron" \
        in flows_page
    assert Job.objects.get(pk=job.pk).status == Job.Status.PAUSED
    assert Workflow.objects.get(pk=workflow.pk).status == Workflow.Status.PAUSED


def services_workflow(owner) -> Workflow:
    """A paused minutely workflow of ``owner``."""
    workflow = workflow_services.create_workflow(
        "w", [{"name": "a", "handler": "noop"}], [], owner=owner, schedule="* * * * *")
    control.pause_workflow(workflow.pk)
    return Workflow.objects.get(pk=workflow.pk)
