"""The admin's resume actions: one per catch_up choice (docs/cron.md, "Pause and
resume"), each through services.resume."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.models import Job
from runs.models import Run, RunState
from tests.test_admin import act, text

pytestmark = pytest.mark.django_db


def held_one_off(name: str) -> Job:
    """A paused one-off job whose run fell due while it was paused."""
    job = services.create_job("noop", {}, name=name, delay_s=60)
    services.pause([job.pk])
    past = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(paused_at=past - timedelta(seconds=5))
    Run.objects.filter(job=job).update(scheduled_at=past, run_at=past)
    return job


@pytest.mark.parametrize("action, runs", [
    ("resume_jobs", False), ("resume_jobs_latest", True), ("resume_jobs_all", True)])
def test_each_resume_action_applies_its_catch_up(admin_client, action, runs):
    job = held_one_off("held")

    page = text(act(admin_client, "/admin/jobs/job/", action, [job.pk]))

    assert "Resumed: 1 job." in page
    assert Job.objects.get(pk=job.pk).status == "active"
    state = Run.objects.get(job=job).state
    assert (state != RunState.CANCELLED) is runs
