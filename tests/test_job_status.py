"""A job's status and next run as the API and the admin show them (docs/api.md, "Job
status"): a one-off job with no run left to run is ``finished``, not ``active``, and a
paused job shows no ``next_run_at`` rather than the stale occurrence it was paused at."""

import re
from datetime import timedelta

import pytest

from jobs import services
from jobs.models import Job
from runs.models import Run, RunState
from tests.test_api_helpers import one_off, recurring

pytestmark = pytest.mark.django_db


def finish(job: Job, state: str) -> None:
    Run.objects.filter(job=job).update(state=state)


def test_a_one_off_job_whose_run_ended_is_finished_in_the_api(api, alice):
    done, died, waiting = one_off(alice), one_off(alice), one_off(alice)
    finish(done, RunState.SUCCEEDED)
    finish(died, RunState.DEAD)

    def status(job):
        return api.get(f"/api/jobs/{job.pk}/").json()["status"]

    assert (status(done), status(died), status(waiting)) == ("finished", "finished", "active")
    assert Job.objects.get(pk=done.pk).status == Job.Status.ACTIVE  # derived, not stored


def test_status_filters_tell_finished_from_active(api, alice):
    done, waiting, cron_job = one_off(alice), one_off(alice), recurring(alice)
    finish(done, RunState.SUCCEEDED)

    def ids(**query):
        return {j["id"] for j in api.get("/api/jobs/", query).json()["results"]}

    assert ids(status="finished") == {done.pk}
    assert ids(status="active") == {waiting.pk, cron_job.pk}
    assert ids(status=["active", "finished"]) == {done.pk, waiting.pk, cron_job.pk}


def test_a_requeued_run_makes_its_finished_job_active_again(api, alice):
    job = one_off(alice)
    finish(job, RunState.SUCCEEDED)
    assert api.get(f"/api/jobs/{job.pk}/").json()["status"] == "finished"
    services.trigger(job.pk)
    assert api.get(f"/api/jobs/{job.pk}/").json()["status"] == "active"


def test_the_admin_shows_and_filters_finished_jobs(admin_client):
    done = services.create_job("noop", name="done-job")
    services.create_job("noop", name="waiting-job", delay_s=3600)
    finish(done, RunState.SUCCEEDED)

    page = admin_client.get("/admin/jobs/job/").content.decode()
    row = page[page.index("done-job"):]
    assert re.search(r'class="job-status-finished">finished<', row[:3000])
    finished = admin_client.get("/admin/jobs/job/", {"status": "finished"}).content.decode()
    active = admin_client.get("/admin/jobs/job/", {"status": "active"}).content.decode()
    assert "done-job" in finished and "waiting-job" not in finished
    assert "waiting-job" in active and "done-job" not in active


def test_a_paused_job_shows_no_next_run_at(api, alice):
    job = recurring(alice, cron="* * * * *")
    stale = job.next_run_at - timedelta(hours=1)
    Job.objects.filter(pk=job.pk).update(next_run_at=stale)  # as after a long pause
    services.pause([job.pk])

    shown = api.get(f"/api/jobs/{job.pk}/").json()
    assert (shown["status"], shown["next_run_at"]) == ("paused", None)
    services.resume([job.pk])
    assert api.get(f"/api/jobs/{job.pk}/").json()["next_run_at"] is not None
