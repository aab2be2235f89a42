"""The admin console end to end (docs/admin.md): an operator in a real browser
logs in, pauses, resumes and triggers a job, requeues a dead run, reads its attempts'
logs, searches logs, and watches the dashboard's numbers move, while a real dispatcher and
worker run the jobs."""

import re

import pytest
from playwright.sync_api import expect

from jobs import services
from jobs.models import Job
from runs.models import Run, RunState
from tests.conftest import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def run_action(page, action: str, ids: list[int]) -> None:
    for pk in ids:
        page.check(f'input[name="_selected_action"][value="{pk}"]')
    page.select_option('select[name="action"]', action)
    page.click('button[name="index"]')


def state_of(run_id: int) -> str:
    return Run.objects.get(pk=run_id).state


def test_pause_resume_and_trigger_a_job(page, daemons):
    job = services.create_job("echo", {"hello": "browser"}, name="nightly export",
                              cron="0 3 * * *", timezone="Europe/Berlin")

    page.goto("/admin/jobs/job/")
    row = page.locator("#result_list tbody tr", has_text="nightly export")
    expect(row).to_contain_text("At 03:00")
    expect(row).to_contain_text("Europe/Berlin")

    run_action(page, "pause_jobs", [job.pk])
    expect(page.locator(".messagelist")).to_contain_text("Paused: 1 job.")
    expect(row.locator("td.field-status_display")).to_have_text("paused")
    assert Job.objects.get(pk=job.pk).status == Job.Status.PAUSED

    run_action(page, "resume_jobs", [job.pk])
    expect(page.locator(".messagelist")).to_contain_text("Resumed: 1 job.")
    expect(row.locator("td.field-status_display")).to_have_text("active")

    run_action(page, "trigger_jobs", [job.pk])
    expect(page.locator(".messagelist")).to_contain_text("Triggered: 1 job.")
    [run] = Run.objects.filter(job=job)
    wait_until(lambda: state_of(run.pk) == RunState.SUCCEEDED, timeout=30,
               message="the triggered run to succeed")

    page.locator(".messagelist a", has_text=str(run.pk)).click()
    expect(page.locator(".fieldBox.field-state_badge")).to_contain_text("succeeded")
    expect(page.locator("section.attempt")).to_have_count(1)
    expect(page.locator("table.log-lines")).to_contain_text("browser")

    page.goto(f"/admin/jobs/job/{job.pk}/change/")
    expect(page.locator(".recent-runs-table")).to_contain_text("succeeded")


def test_requeue_a_dead_run_read_its_attempt_logs_and_search_logs(page, daemons):
    job = services.create_job("flaky", {"fail_first": 1}, name="flaky once", delay_s=0,
                              max_attempts=1)
    [run] = Run.objects.filter(job=job)
    wait_until(lambda: state_of(run.pk) == RunState.DEAD, timeout=30,
               message="the flaky run to reach the dead letter")

    page.goto("/admin/runs/deadrun/")
    row = page.locator("#result_list tbody tr", has_text="flaky once")
    expect(row).to_contain_text("flaky: attempt 1 failed on purpose")
    run_action(page, "requeue_dead", [run.pk])
    expect(page.locator("h1")).to_contain_text("Requeue 1 dead run?")
    assert state_of(run.pk) == RunState.DEAD  # nothing happens before the confirmation
    page.click('input[type=submit][value^="Yes, requeue"]')
    expect(page.locator(".messagelist")).to_contain_text("Requeued: 1 dead run.")
    expect(page.locator("#result_list", has_text="flaky once")).to_have_count(0)
    wait_until(lambda: state_of(run.pk) == RunState.SUCCEEDED, timeout=30,
               message="the requeued run to succeed on its second attempt")

    page.goto(f"/admin/runs/run/{run.pk}/change/")
    first, second = page.locator("section.attempt").all()
    expect(first).to_contain_text("failed")
    expect(first.locator("pre.traceback")).to_contain_text("HandlerFailure")
    expect(first.locator("table.log-lines")).to_contain_text("attempt 1 fails on purpose")
    expect(first.locator("table.log-lines")).to_contain_text("WARNING")
    expect(second).to_contain_text("succeeded")
    expect(second.locator("table.log-lines")).to_contain_text("attempt 2 succeeds")

    page.goto("/admin/runs/logline/")
    page.fill("#searchbar", "on purpose")
    page.press("#searchbar", "Enter")
    results = page.locator("#result_list tbody tr")
    expect(results).to_have_count(1)
    expect(results).to_contain_text("attempt 1 fails on purpose")
    page.locator("details[data-filter-title='level (at least)'] a", has_text="ERROR").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(0)
    page.fill("#searchbar", "succeeds")
    page.press("#searchbar", "Enter")
    expect(page.locator("#result_list tbody tr")).to_have_count(0)  # INFO < ERROR
    page.locator("details[data-filter-title='level (at least)'] a", has_text="All").click()
    expect(page.locator("#result_list tbody tr")).to_contain_text("attempt 2 succeeds")


def test_the_dashboard_refreshes_its_numbers_without_reloading(page, daemons):
    page.goto("/admin/")
    page.click("#scheduler-operations a:text('Dashboard')")
    expect(page).to_have_url(re.compile(r"/admin/dashboard/$"))
    started = page.locator('[data-total="started_last_hour"]')
    expect(started).to_have_text("0")
    page.evaluate("window.__not_reloaded = true")

    for i in range(3):
        services.create_job("noop", {}, name=f"dash {i}", delay_s=0)
    wait_until(lambda: Run.objects.filter(state=RunState.SUCCEEDED).count() == 3,
               timeout=30, message="three runs to succeed")

    expect(started).to_have_text("3", timeout=15_000)
    expect(page.locator('[data-total="succeeded_last_hour"]')).to_have_text("3")
    expect(page.locator("#dash-workers")).to_contain_text("default")
    expect(page.locator('[data-total="live_workers"]')).to_have_text("1")
    expect(page.locator("#chart-throughput path.line")).to_have_count(3)
    assert page.evaluate("window.__not_reloaded") is True


def test_a_browsers_add_and_change_posts_are_taken_whole(page):
    """The job forms refuse a posted field they do not have (jobs/admin/forms.py): what a
    real browser posts (split date widgets, Django's initial- copies, the admin's
    buttons) must never count as one."""
    page.goto("/admin/jobs/job/add/")
    page.select_option('select[name="handler"]', "noop")
    page.fill('input[name="name"]', "browser made")
    page.fill('input[name="cron"]', "@hourly")
    page.click('input[name="_save"]')
    expect(page.locator(".messagelist")).to_contain_text("browser made")
    job = Job.objects.get(name="browser made")
    assert job.schedule.cron == "0 * * * *"  # @hourly, normalised

    page.goto(f"/admin/jobs/job/{job.pk}/change/")
    page.fill('input[name="name"]', "browser changed")
    page.click('input[name="_save"]')
    expect(page.locator(".messagelist")).to_contain_text("browser changed")
    assert Job.objects.get(pk=job.pk).name == "browser changed"
