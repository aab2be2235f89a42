"""Editing a cron job's schedule in the admin (docs/admin.md, "Jobs"): the same
checks as PATCH /api/jobs/{id}/ and the same write (services.update_job), so the next run
is recomputed and nothing half-valid is stored."""

import re
from datetime import UTC, datetime

import pytest

from jobs import services
from jobs.models import Job
from jobs.schedules import cron
from runs.clock import db_now

pytestmark = pytest.mark.django_db


def form_of(job: Job, **changes) -> dict:
    schedule = job.schedule
    form = {"name": job.name, "payload": "{}", "priority": str(job.priority),
            "timeout_s": str(job.timeout_s), "max_attempts": str(job.max_attempts),
            "cron": schedule.cron, "timezone": schedule.timezone,
            "misfire_policy": schedule.misfire_policy, "max_lag_s": str(schedule.max_lag_s),
            "jitter_s": str(schedule.jitter_s), "_save": "Save"}
    return {**form, **changes}


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def test_the_change_page_offers_the_schedule_fields(admin_client):
    job = services.create_job("echo", {}, cron="*/5 * * * *", timezone="UTC")
    page = text(admin_client.get(f"/admin/jobs/job/{job.pk}/change/"))
    for name in ("cron", "timezone", "misfire_policy", "max_lag_s", "jitter_s"):
        assert f'name="{name}"' in page, name


def test_a_new_schedule_is_saved_and_the_next_run_recomputed(admin_client):
    job = services.create_job("echo", {}, cron="0 0 1 1 *", timezone="UTC")
    before = db_now()

    answer = admin_client.post(f"/admin/jobs/job/{job.pk}/change/", form_of(
        job, cron="30 9 * * *", timezone="Asia/Tokyo", misfire_policy="skip",
        max_lag_s="120", jitter_s="30"))

    assert answer.status_code == 302, text(answer)
    job = Job.objects.select_related("schedule").get(pk=job.pk)
    schedule = job.schedule
    assert (schedule.cron, schedule.timezone, schedule.misfire_policy, schedule.max_lag_s,
            schedule.jitter_s) == ("30 9 * * *", "Asia/Tokyo", "skip", 120, 30)
    assert job.next_run_at == cron.next_after("30 9 * * *", "Asia/Tokyo", job.updated_at) \
        or job.next_run_at == cron.next_after("30 9 * * *", "Asia/Tokyo", before)
    assert job.next_run_at.astimezone(UTC).hour == 0  # 09:30 in Tokyo is 00:30 UTC
    assert job.next_run_at > datetime.now(UTC)


def test_a_bad_schedule_is_named_on_its_field_and_nothing_changes(admin_client):
    job = services.create_job("echo", {}, cron="@daily")
    stored = job.schedule.cron

    page = text(admin_client.post(f"/admin/jobs/job/{job.pk}/change/", form_of(
        job, cron="61 * * * *", timezone="Mars/Olympus", jitter_s="99999", name="renamed")))

    assert "bad minute field" in page
    assert "unknown IANA timezone" in page
    assert "jitter_s" in page or "from 0 to" in page
    job = Job.objects.select_related("schedule").get(pk=job.pk)
    assert (job.name, job.schedule.cron, job.schedule.timezone) == ("echo", stored, "UTC")
