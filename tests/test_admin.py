"""The admin console (docs/admin.md) through Django's test client: jobs, runs, the dead letter,
log search and read-only rules. The browser tests are in tests/e2e/."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import services
from jobs.admin import describe_cron
from jobs.models import Job
from runs.models import Attempt, AttemptOutcome, LogLine, Run, RunState

pytestmark = pytest.mark.django_db

TRACEBACK = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
             "jobs.handlers.HandlerFailure: the printer is on fire")


def one_off(name="report", handler="noop", **options) -> Job:
    return services.create_job(handler, {}, name=name, delay_s=0, **options)


def make_run(job, state=RunState.SUCCEEDED, *, scheduled_at=None, attempts=(),
             worker="w-1", max_attempts=None) -> Run:
    """A run in ``state`` with ``attempts``: (started, finished, outcome, error, logs), logs
    being (level, message) pairs. Written straight to the tables: this is test setup, the
    admin itself only ever goes through the services."""
    scheduled_at = scheduled_at or timezone.now() - timedelta(minutes=5)
    last = attempts[-1] if attempts else None
    run = Run.objects.create(
        job=job, scheduled_at=scheduled_at, run_at=scheduled_at, state=state, queue=job.queue,
        attempt=len(attempts), max_attempts=max_attempts or job.max_attempts,
        worker_id=worker if attempts else "",
        started_at=last[0] if last else None,
        finished_at=last[1] if last and state in (RunState.SUCCEEDED, RunState.DEAD) else None,
        lease_expires_at=timezone.now() + timedelta(seconds=60)
        if state == RunState.RUNNING else None,
        error=last[3] if last and state == RunState.DEAD else "",
    )
    # Made when it was scheduled, as the scheduler makes runs: lag counts from the later
    # of the two (runs/models.py, LAG_FROM).
    Run.objects.filter(pk=run.pk).update(created_at=min(scheduled_at, run.created_at))
    for number, (started, finished, outcome, error, logs) in enumerate(attempts, start=1):
        attempt = Attempt.objects.create(run=run, number=number, worker_id=worker,
                                         started_at=started, finished_at=finished,
                                         outcome=outcome, error=error)
        LogLine.objects.bulk_create([
            LogLine(attempt=attempt, created_at=started + timedelta(milliseconds=i),
                    level=level, logger="jobs.run.test", message=message)
            for i, (level, message) in enumerate(logs)
        ])
    return run


def dead_run(job, *, error=TRACEBACK, logs=((40, "about to fail"),)) -> Run:
    start = timezone.now() - timedelta(minutes=1)
    return make_run(job, RunState.DEAD, max_attempts=1, attempts=[
        (start, start + timedelta(seconds=1), AttemptOutcome.FAILED, error, list(logs))])


def act(client, url, action, ids, **extra):
    return client.post(url, {"action": action, "_selected_action": [str(i) for i in ids],
                             **extra}, follow=True)


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


# ---- jobs -----------------------------------------------------------------------------


def test_job_list_shows_the_schedule_in_words_beside_cron_and_the_last_outcome(admin_client):
    job = services.create_job("echo", {}, name="stand-up", cron="30 9 * * 1-5",
                              timezone="Europe/Berlin")
    now = timezone.now()
    make_run(job, RunState.DEAD, scheduled_at=now - timedelta(days=2), attempts=[
        (now - timedelta(days=2), now - timedelta(days=2), AttemptOutcome.FAILED, "x", [])])
    make_run(job, RunState.SUCCEEDED, scheduled_at=now - timedelta(days=1), attempts=[
        (now - timedelta(days=1), now - timedelta(days=1), AttemptOutcome.SUCCEEDED, "", [])])

    page = text(admin_client.get("/admin/jobs/job/"))

    assert "At 09:30, Monday through Friday" in page
    assert "<code>30 9 * * 1-5</code>" in page
    assert "Europe/Berlin" in page
    # The schedule's zone sits beside it: the header says the next run is in the site's.
    assert "Next run (UTC)" in page
    assert "Times in UTC" in page  # on every admin page, beside the user links
    assert "View site" not in page  # the site has no page but the admin
    row = page[page.index("stand-up"):]
    assert 'class="run-state run-state-succeeded">succeeded' in row[:3000]
    assert job.next_run_at.strftime("%Y-%m-%d %H:%M:%S") in row[:3000]


@pytest.mark.parametrize(("expression", "words"), [
    ("0 0 * * 5#3", "At 00:00, on the third Friday of the month"),
    ("*/5 9-17 * * 1-5", "Every 5 minutes, between 09:00 and 17:59, Monday through Friday"),
    ("99 99 99 99 99", "99 99 99 99 99"),  # unreadable: shown as it is, never a 500
])
def test_schedules_are_described_in_words_on_a_24_hour_clock(expression, words):
    assert describe_cron(expression) == words


def test_job_list_costs_the_same_number_of_queries_for_3_or_30_jobs(admin_client):
    def queries_for_page() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert admin_client.get("/admin/jobs/job/").status_code == 200
        return len(ctx.captured_queries)

    for i in range(3):
        make_run(services.create_job("echo", {}, name=f"j{i}", cron="* * * * *"),
                 attempts=[(timezone.now(), timezone.now(), AttemptOutcome.SUCCEEDED, "", [])])
    few = queries_for_page()
    for i in range(27):
        make_run(services.create_job("echo", {}, name=f"k{i}", cron="@hourly"),
                 attempts=[(timezone.now(), timezone.now(), AttemptOutcome.SUCCEEDED, "", [])])
    assert queries_for_page() == few


def test_pause_resume_and_trigger_call_the_services_and_report_counts(admin_client):
    a, b = one_off("a"), one_off("b")
    url = "/admin/jobs/job/"

    page = text(act(admin_client, url, "pause_jobs", [a.pk, b.pk]))
    assert "Paused: 2 jobs." in page
    assert set(Job.objects.values_list("status", flat=True)) == {"paused"}

    page = text(act(admin_client, url, "trigger_jobs", [a.pk]))
    assert "Triggered: 0 jobs." in page and "only active jobs can be triggered" in page

    page = text(act(admin_client, url, "resume_jobs", [a.pk]))
    assert "Resumed: 1 job." in page
    assert Job.objects.get(pk=a.pk).status == "active"

    runs_before = Run.objects.filter(job=a).count()
    page = text(act(admin_client, url, "trigger_jobs", [a.pk, b.pk]))
    assert "Triggered: 1 job." in page and "1 of the 2 selected left alone" in page
    assert Run.objects.filter(job=a).count() == runs_before + 1


def test_actions_work_from_the_job_page_too(admin_client):
    job = one_off("a")
    url = f"/admin/jobs/job/{job.pk}/change/"

    response = admin_client.post(url, {"CHANGE_FORM-action": "pause_jobs",
                                       "_selected_action": [str(job.pk)]}, follow=True)

    assert "Paused: 1 job." in text(response)
    assert Job.objects.get(pk=job.pk).status == "paused"


def test_cancelling_jobs_asks_for_confirmation_first(admin_client):
    job = one_off("to cancel")
    url = "/admin/jobs/job/"

    page = text(act(admin_client, url, "cancel_jobs", [job.pk]))
    assert "Cancel 1 job?" in page and "to cancel" in page
    assert Job.objects.get(pk=job.pk).status == "active"

    page = text(act(admin_client, url, "cancel_jobs", [job.pk], confirm="yes"))
    assert "Cancelled: 1 job." in page
    assert Job.objects.get(pk=job.pk).status == "cancelled"
    assert set(Run.objects.filter(job=job).values_list("state", flat=True)) == {"cancelled"}


def test_job_page_shows_its_recent_runs_and_next_occurrences(admin_client):
    job = services.create_job("echo", {}, name="hourly", cron="@hourly")
    run = make_run(job, attempts=[(timezone.now(), timezone.now(),
                                   AttemptOutcome.SUCCEEDED, "", [])])

    page = text(admin_client.get(f"/admin/jobs/job/{job.pk}/change/"))

    assert f'href="/admin/runs/run/{run.pk}/change/"' in page
    assert f'/admin/runs/run/?job={job.pk}' in page
    assert "Every hour" in page
    assert job.next_run_at.strftime("%Y-%m-%d %H:00 UTC") in page


def test_a_job_created_in_the_admin_goes_through_the_service(admin_client):
    form = {"name": "nightly", "handler": "echo", "payload": '{"a": 1}', "cron": "15 3 * * *",
            "timezone": "Europe/Paris", "misfire_policy": "skip", "queue": "default",
            "priority": "3", "timeout_s": "60", "max_attempts": "2"}

    response = admin_client.post("/admin/jobs/job/add/", form, follow=True)

    assert response.status_code == 200
    job = Job.objects.get(name="nightly")
    assert (job.schedule.cron, job.schedule.timezone, job.schedule.misfire_policy) == (
        "15 3 * * *", "Europe/Paris", "skip")
    assert job.next_run_at is not None and job.payload == {"a": 1}
    assert job.owner.username == "admin"


def test_a_bad_job_is_refused_naming_the_field_and_nothing_is_stored(admin_client):
    form = {"name": "bad", "handler": "echo", "payload": "{}", "cron": "61 * * * *",
            "timezone": "Mars/Olympus", "misfire_policy": "run_once", "queue": "default",
            "priority": "5", "timeout_s": "60", "max_attempts": "4"}

    page = text(admin_client.post("/admin/jobs/job/add/", form))

    assert "bad minute field" in page
    assert "unknown IANA timezone" in page
    assert not Job.objects.filter(name="bad").exists()


def test_a_one_off_job_with_no_time_runs_once_now(admin_client):
    form = {"name": "now", "handler": "noop", "payload": "{}", "misfire_policy": "run_once",
            "queue": "default", "priority": "5", "timeout_s": "60", "max_attempts": "4"}

    admin_client.post("/admin/jobs/job/add/", form)

    [run] = Run.objects.filter(job__name="now")
    assert abs((run.scheduled_at - timezone.now()).total_seconds()) < 60


def test_editing_a_job_changes_only_the_safe_fields_and_validates_them(admin_client):
    job = services.create_job("echo", {}, name="old", cron="@daily")
    url = f"/admin/jobs/job/{job.pk}/change/"
    form = {"name": "new", "payload": "{}", "priority": "5", "timeout_s": "60",
            "max_attempts": "4", "cron": "@daily", "timezone": "UTC",
            "misfire_policy": "run_once", "max_lag_s": "3600", "jitter_s": "0",
            "_save": "Save"}

    page = text(admin_client.post(url, {**form, "max_attempts": "1000"}))
    assert "must be between 1 and 100" in page
    assert Job.objects.get(pk=job.pk).name == "old"

    Job.objects.filter(pk=job.pk).update(status="paused")  # as if paused meanwhile
    # Fields the page does not show are refused, naming them; nothing of the post is kept.
    page = text(admin_client.post(url, {**form, "handler": "noop", "status": "active"}))
    assert "handler: unknown field" in page and "status: unknown field" in page
    job.refresh_from_db()
    assert (job.name, job.handler, job.status) == ("old", "echo", "paused")
    admin_client.post(url, form)
    job.refresh_from_db()
    assert (job.name, job.handler, job.status) == ("new", "echo", "paused")


def test_jobs_cannot_be_deleted_from_the_admin(admin_client):
    job = one_off()
    assert admin_client.post(f"/admin/jobs/job/{job.pk}/delete/", {"post": "yes"}
                             ).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


# ---- runs -----------------------------------------------------------------------------


def test_run_list_shows_lag_from_the_first_attempt_and_duration_from_the_last(admin_client):
    job = one_off()
    scheduled = timezone.now() - timedelta(minutes=10)
    first = scheduled + timedelta(seconds=2.5)
    last = scheduled + timedelta(seconds=40)
    run = make_run(job, scheduled_at=scheduled, attempts=[
        (first, first + timedelta(seconds=1), AttemptOutcome.FAILED, "boom", []),
        (last, last + timedelta(seconds=12.25), AttemptOutcome.SUCCEEDED, "", []),
    ])

    page = text(admin_client.get(f"/admin/runs/run/?job={job.pk}"))

    row = page[page.index(f"/admin/runs/run/{run.pk}/change/"):]
    assert '<td class="field-lag_display">2.500 s</td>' in row
    assert '<td class="field-duration_display">12.2 s</td>' in row
    assert '<td class="field-attempts_display">2 / 4</td>' in row


def test_run_list_costs_the_same_number_of_queries_for_3_or_30_runs(admin_client):
    job = one_off()

    def queries_for_page() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert admin_client.get("/admin/runs/run/").status_code == 200
        return len(ctx.captured_queries)

    def add_runs(n, offset):
        for i in range(n):
            at = timezone.now() - timedelta(hours=1, seconds=offset + i)
            make_run(job, scheduled_at=at, attempts=[
                (at, at + timedelta(seconds=1), AttemptOutcome.SUCCEEDED, "", [(20, "hi")])])

    add_runs(3, 0)
    few = queries_for_page()
    add_runs(27, 100)
    assert queries_for_page() == few


def test_run_list_filters_by_state_queue_job_and_time(admin_client):
    a, b = one_off("a"), one_off("b", queue="mail")
    old = make_run(a, scheduled_at=timezone.now() - timedelta(days=3))
    dead = dead_run(a)
    mail = make_run(b)

    def ids(query):
        page = admin_client.get(f"/admin/runs/run/?{query}")
        return {int(x) for x in re.findall(r"/admin/runs/run/(\d+)/change/",
                                           page.content.decode())}

    assert dead.pk in ids("state__exact=dead") and old.pk not in ids("state__exact=dead")
    assert ids("queue=mail") == {mail.pk} | {r.pk for r in Run.objects.filter(job=b)}
    assert mail.pk not in ids(f"job={a.pk}") and old.pk in ids(f"job={a.pk}")
    since = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert old.pk not in ids(f"scheduled_at__gte={since}")
    assert dead.pk in ids(f"scheduled_at__gte={since}")


def test_a_bad_filter_value_is_named_in_a_warning_instead_of_an_error_page(admin_client):
    response = admin_client.get("/admin/runs/run/?scheduled_at__gte=yesterday&job=abc")

    assert response.status_code == 200
    page = text(response).lower()
    assert "scheduled: &#x27;yesterday&#x27; is not a date and time" in page
    assert "job id: &#x27;abc&#x27; is not an id" in page


def test_run_page_shows_every_attempt_with_worker_times_outcome_traceback_and_logs(
        admin_client):
    job = one_off()
    t = timezone.now() - timedelta(minutes=3)
    run = make_run(job, attempts=[
        (t, t + timedelta(seconds=1), AttemptOutcome.FAILED, TRACEBACK,
         [(30, "attempt 1 fails <on purpose>")]),
        (t + timedelta(seconds=5), t + timedelta(seconds=6), AttemptOutcome.SUCCEEDED, "",
         [(20, "attempt 2 succeeds")]),
    ], worker="host:42:abc")

    page = text(admin_client.get(f"/admin/runs/run/{run.pk}/change/"))

    assert 'data-attempt="1"' in page and 'data-attempt="2"' in page
    assert "host:42:abc" in page
    assert "outcome-failed" in page and "outcome-succeeded" in page
    assert '<pre class="traceback">Traceback (most recent call last):' in page
    assert "HandlerFailure: the printer is on fire" in page
    assert "attempt 1 fails &lt;on purpose&gt;" in page  # escaped
    assert "attempt 2 succeeds" in page
    assert "WARNING" in page and "INFO" in page


@pytest.mark.parametrize("url", ["/admin/runs/run/{pk}/change/", "/admin/runs/run/{pk}/delete/",
                                 "/admin/runs/run/add/",
                                 "/admin/runs/attempt/{attempt}/change/"])
def test_runs_and_attempts_are_read_only(admin_client, url):
    run = dead_run(one_off())
    attempt = run.attempts.get()
    url = url.format(pk=run.pk, attempt=attempt.pk)

    response = admin_client.post(url, {"state": "succeeded", "post": "yes", "attempt": "0",
                                       "outcome": "succeeded"})

    assert response.status_code == 403
    run.refresh_from_db()
    attempt.refresh_from_db()
    assert (run.state, attempt.outcome) == (RunState.DEAD, AttemptOutcome.FAILED)


def test_the_run_page_has_no_save_button(admin_client):
    run = dead_run(one_off())
    page = text(admin_client.get(f"/admin/runs/run/{run.pk}/change/"))
    assert 'name="_save"' not in page and "View run" in page


def test_staff_without_the_change_permission_see_runs_but_no_actions(client):
    user = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        codename__in=["view_run", "view_deadrun", "view_job"]))
    client.force_login(user)
    run = dead_run(one_off())

    page = text(client.get("/admin/runs/deadrun/"))
    assert f"/admin/runs/deadrun/{run.pk}/change/" in page
    assert "requeue_dead" not in page

    response = act(client, "/admin/runs/deadrun/", "requeue_dead", [run.pk], confirm="yes")
    assert Run.objects.get(pk=run.pk).state == RunState.DEAD
    assert response.status_code == 200


# ---- dead letter ----------------------------------------------------------------------


def test_dead_letter_lists_only_dead_runs_with_the_reason_each_died(admin_client):
    job = one_off()
    dead = dead_run(job)
    lost = dead_run(job, error="lease expired: worker w-9 stopped heartbeating during attempt 1")
    alive = make_run(job)

    page = text(admin_client.get("/admin/runs/deadrun/"))

    assert f"/admin/runs/deadrun/{dead.pk}/change/" in page
    assert f"/admin/runs/deadrun/{lost.pk}/change/" in page
    assert f"/admin/runs/deadrun/{alive.pk}/change/" not in page
    assert "jobs.handlers.HandlerFailure: the printer is on fire" in page
    assert "lease expired: worker w-9 stopped heartbeating" in page
    assert '<td class="field-last_outcome">failed</td>' in page
    assert "2 dead runs in the dead letter" in page


def test_requeue_from_the_dead_letter_confirms_then_resets_the_attempt_budget(admin_client):
    job = one_off(max_attempts=3)
    run = dead_run(job)
    url = "/admin/runs/deadrun/"

    page = text(act(admin_client, url, "requeue_dead", [run.pk]))
    assert "Requeue 1 dead run?" in page and "the printer is on fire" in page
    assert Run.objects.get(pk=run.pk).state == RunState.DEAD

    page = text(act(admin_client, url, "requeue_dead", [run.pk], confirm="yes"))
    assert "Requeued: 1 dead run." in page
    run.refresh_from_db()
    assert (run.state, run.attempt, run.max_attempts, run.error) == (
        RunState.SCHEDULED, 1, 1 + 3, "")


def test_requeue_leaves_runs_of_paused_jobs_in_the_dead_letter_and_says_why(admin_client):
    job = one_off()
    run = dead_run(job)
    services.pause([job.pk])

    page = text(act(admin_client, "/admin/runs/deadrun/", "requeue_dead", [run.pk],
                    confirm="yes"))

    assert "Requeued: 0 dead runs." in page
    assert "their job is paused or cancelled" in page
    assert Run.objects.get(pk=run.pk).state == RunState.DEAD


def test_discard_confirms_then_takes_runs_out_of_the_dead_letter(admin_client):
    runs = [dead_run(one_off()), dead_run(one_off())]
    url = "/admin/runs/deadrun/"

    page = text(act(admin_client, url, "discard_dead", [r.pk for r in runs]))
    assert "Discard 2 dead runs?" in page
    assert Run.objects.dead().count() == 2

    page = text(act(admin_client, url, "discard_dead", [r.pk for r in runs], confirm="yes"))
    assert "Discarded: 2 dead runs." in page
    assert Run.objects.dead().count() == 0
    assert Attempt.objects.filter(run__in=runs).count() == 2  # history kept


def test_requeue_from_a_dead_runs_page_lands_on_the_run(admin_client):
    run = dead_run(one_off())
    url = f"/admin/runs/deadrun/{run.pk}/change/"
    fields = {"CHANGE_FORM-action": "requeue_dead", "_selected_action": [str(run.pk)]}

    assert "Requeue 1 dead run?" in text(admin_client.post(url, fields))
    response = admin_client.post(url, {**fields, "confirm": "yes"})

    assert response.status_code == 302
    assert response["Location"] == f"/admin/runs/run/{run.pk}/change/"
    assert Run.objects.get(pk=run.pk).state == RunState.SCHEDULED


def test_select_all_across_pages_reaches_the_confirmation_with_the_filter_kept(admin_client):
    a, b = one_off("a"), one_off("b")
    in_a = [dead_run(a) for _ in range(3)]
    in_b = dead_run(b)
    url = f"/admin/runs/deadrun/?job={a.pk}"
    data = {"action": "discard_dead", "select_across": "1", "index": "0",
            "_selected_action": [str(in_a[0].pk)]}

    assert "Discard 3 dead runs?" in text(admin_client.post(url, data))
    admin_client.post(url, {**data, "confirm": "yes"})

    assert not Run.objects.filter(pk__in=[r.pk for r in in_a], state="dead").exists()
    assert Run.objects.get(pk=in_b.pk).state == RunState.DEAD


# ---- log search -----------------------------------------------------------------------


def test_log_lines_are_searchable_across_runs_by_text_level_and_time(admin_client):
    job_a, job_b = one_off("a"), one_off("b")
    now = timezone.now()
    make_run(job_a, attempts=[(now - timedelta(hours=3), now, AttemptOutcome.SUCCEEDED, "",
                               [(20, "invoice 17 sent"), (40, "invoice 18 bounced")])])
    make_run(job_b, attempts=[(now - timedelta(minutes=2), now, AttemptOutcome.SUCCEEDED, "",
                               [(30, "invoice 19 slow"), (20, "cache warm")])])

    def messages_for(query):
        page = admin_client.get(f"/admin/runs/logline/?{query}").content.decode()
        return set(re.findall(r"invoice \d+ \w+|cache warm", page))

    assert messages_for("q=invoice") == {"invoice 17 sent", "invoice 18 bounced",
                                         "invoice 19 slow"}
    assert messages_for('q="18 bounced"') == {"invoice 18 bounced"}
    assert messages_for("q=invoice&level=30") == {"invoice 18 bounced", "invoice 19 slow"}
    since = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert messages_for(f"created_at__gte={since}") == {"invoice 19 slow", "cache warm"}
    until = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert messages_for(f"created_at__lt={until}&level=40") == {"invoice 18 bounced"}
    assert messages_for(f"job={job_b.pk}") == {"invoice 19 slow", "cache warm"}
    assert messages_for("q=nothing-like-this") == set()


def filter_params(model_admin, request) -> set[str]:
    """Every query parameter the change list's filters (and search) of ``model_admin``
    read."""
    from django.contrib import admin as django_admin

    changelist = model_admin.get_changelist_instance(request)
    names = {"q", "o"}
    for spec in changelist.filter_specs:
        names |= set(spec.expected_parameters())
    assert isinstance(model_admin, django_admin.ModelAdmin)
    return names


def test_a_nul_character_in_any_filter_of_any_list_is_a_400_not_a_500(admin_client, rf):
    """PostgreSQL text cannot hold NUL: it failed the page with a DataError."""
    from django.contrib import admin as django_admin

    one_off()
    admin_client.get("/admin/")  # loads the URL configuration, which registers every page
    checked = set()
    for model, model_admin in list(django_admin.site._registry.items()):
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        request = rf.get(url)
        request.user = admin_client.get(url).wsgi_request.user
        for name in filter_params(model_admin, request):
            response = admin_client.get(url, {name: "a\x00b"})
            assert response.status_code == 400, (url, name)
            assert name in response.content.decode()
            checked.add((url, name))
    assert {("/admin/jobs/job/", "handler"), ("/admin/runs/run/", "state__exact"),
            ("/admin/runs/run/", "job"), ("/admin/runs/deadrun/", "job")} <= checked
    # The queue filters list the broker's queues; with none known they are not shown.
    for url in ("/admin/jobs/job/", "/admin/runs/run/", "/admin/runs/deadrun/"):
        assert admin_client.get(url, {"queue": "\x00"}).status_code == 400


@pytest.mark.parametrize("extra", ["schedule", "cron_1", "timezone_0", "CHANGE_FORM-cron",
                                   "index", "initial-schedule"])
def test_the_add_form_refuses_a_field_under_a_widgets_or_controls_name(admin_client, extra):
    """Names that only look like a split widget's part or the change page's actions were
    dropped: cron_1=@hourly made a one-off job due now (an adversarial pass)."""
    form = {"name": "n", "handler": "noop", "payload": "{}", "queue": "default",
            "misfire_policy": "run_once", "priority": "5", "timeout_s": "60",
            "max_attempts": "4", "_save": "Save", extra: "@hourly"}
    page = text(admin_client.post("/admin/jobs/job/add/", form))
    assert f"{extra}: unknown field" in page
    assert not Job.objects.filter(name="n").exists()


def test_the_add_form_refuses_a_posted_field_it_does_not_have(admin_client):
    """A script posting a REST-shaped spec (``schedule``) made a one-off job due now."""
    form = {"name": "n", "handler": "noop", "payload": "{}", "schedule": "@hourly",
            "timezone": "UTC", "misfire_policy": "run_once", "priority": "5",
            "timeout_s": "60", "max_attempts": "4", "_save": "Save"}
    page = text(admin_client.post("/admin/jobs/job/add/", form))
    assert "schedule: unknown field (did you mean &#x27;cron&#x27;?)" in page \
        or "schedule: unknown field (did you mean 'cron'?)" in page
    assert not Job.objects.filter(name="n").exists()


def test_the_add_form_refuses_a_run_at_beside_a_cron_as_rest_does(admin_client):
    """The form dropped run_at when a cron was given: a 302 and a cron job."""
    form = {"name": "both", "handler": "noop", "payload": "{}", "cron": "30 2 * * *",
            "timezone": "UTC", "misfire_policy": "run_once", "priority": "5",
            "timeout_s": "60", "max_attempts": "4", "run_at_0": "2030-01-01",
            "run_at_1": "09:00:00", "queue": "default", "_save": "Save"}
    page = text(admin_client.post("/admin/jobs/job/add/", form))
    assert "give at most one of run_at, delay_s or cron" in page, \
        re.findall(r"errorlist.{0,200}", page)
    assert not Job.objects.filter(name="both").exists()
