"""The admin's trigger action reports why each selected job was not triggered: a paused
or cancelled job, or its owner's pending runs quota (docs/isolation.md, "Tenant
bounds"), naming the owner and the limit."""

import pytest
from django.contrib.auth import get_user_model

from jobs import services
from jobs.tenants import set_owner_policy
from runs.models import Run
from tests.test_admin import act, text

pytestmark = pytest.mark.django_db


def test_a_quota_refusal_names_the_owner_and_the_limit(admin_client):
    """It read "only active jobs can be triggered" for three active jobs."""
    carol = get_user_model().objects.create_user("carol")
    set_owner_policy(carol, max_pending=3)
    jobs = [services.create_job("noop", {}, name=f"r{i}", cron="@daily", owner=carol)
            for i in range(3)]
    for job in jobs:
        services.trigger(job.pk)
    before = Run.objects.count()

    page = text(act(admin_client, "/admin/jobs/job/", "trigger_jobs",
                    [job.pk for job in jobs]))

    assert "Triggered: 0 jobs." in page
    assert "only active jobs" not in page
    assert "3 of the 3 selected left alone" in page
    assert "carol" in page and "max_pending" in page and "at most 3" in page
    assert Run.objects.count() == before


def test_mixed_refusals_each_get_their_reason(admin_client):
    carol = get_user_model().objects.create_user("carol")
    set_owner_policy(carol, max_pending=1)
    full = services.create_job("noop", {}, name="full", cron="@daily", owner=carol)
    services.trigger(full.pk)
    paused = services.create_job("noop", {}, name="paused", cron="@daily")
    services.pause([paused.pk])
    fine = services.create_job("noop", {}, name="fine", cron="@daily")

    page = text(act(admin_client, "/admin/jobs/job/", "trigger_jobs",
                    [full.pk, paused.pk, fine.pk]))

    assert "Triggered: 1 job." in page and "2 of the 3 selected left alone" in page
    assert "only active jobs can be triggered (1)" in page
    assert "carol" in page and "max_pending" in page
