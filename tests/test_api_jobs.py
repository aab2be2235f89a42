"""The jobs endpoints: list (filters, ordering, page-number pagination), partial update,
cancel (DELETE), pause, resume, trigger and bulk create."""

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobs.models import Job
from jobs.schedules import cron
from jobs.tenants import set_owner_policy
from runs.models import Attempt, Run, RunState
from tests.test_api_helpers import one_off, recurring

pytestmark = pytest.mark.django_db


def test_jobs_are_listed_newest_first_a_page_at_a_time(api, alice):
    ids = [recurring(alice).pk for _ in range(5)]

    first = api.get("/api/jobs/", {"page_size": 2}).json()
    last = api.get("/api/jobs/", {"page_size": 2, "page": 3}).json()

    assert first["count"] == 5
    assert [j["id"] for j in first["results"]] == ids[::-1][:2]
    assert "page=2" in first["next"]
    assert [j["id"] for j in last["results"]] == [ids[0]]
    assert api.get("/api/jobs/", {"page": 9}).status_code == 404


def test_jobs_filter_by_status_handler_queue_kind_and_name(api, alice):
    set_owner_policy(alice, queues=["reports"])
    nightly = recurring(alice, name="nightly report", queue="reports")
    once = one_off(alice, name="send invoice 42")
    paused = recurring(alice, name="paused one")
    api.post(f"/api/jobs/{paused.pk}/pause/")

    def ids(**query):
        return {j["id"] for j in api.get("/api/jobs/", query).json()["results"]}

    assert ids(status="paused") == {paused.pk}
    assert ids(status=["active", "paused"]) == {nightly.pk, once.pk, paused.pk}
    assert ids(handler="noop") == {once.pk}
    assert ids(queue="reports") == {nightly.pk}
    assert ids(recurring="true") == {nightly.pk, paused.pk}
    assert ids(recurring="false") == {once.pk}
    assert ids(name="INVOICE") == {once.pk}
    assert ids(created_after="2000-01-01T00:00:00Z", created_before="2000-01-02T00:00:00Z") \
        == set()
    assert api.get("/api/jobs/", {"status": "sleeping"}).status_code == 400


def test_jobs_order_by_the_documented_fields(api, alice):
    set_owner_policy(alice, highest_priority=0)
    low = recurring(alice, name="b", priority=9)
    high = recurring(alice, name="a", priority=0)

    def order(ordering):
        return [j["id"] for j in api.get("/api/jobs/", {"ordering": ordering}).json()["results"]]

    assert order("priority") == [high.pk, low.pk]
    assert order("-priority") == [low.pk, high.pk]
    assert order("name") == [high.pk, low.pk]
    assert order("id") == [low.pk, high.pk]


def test_changing_the_schedule_recomputes_next_run_and_drops_the_old_lookahead_runs(
        api, alice):
    job = recurring(alice, cron="* * * * *")
    ahead = Run.objects.create(job=job, scheduled_at=timezone.now() + timedelta(seconds=30),
                               run_at=timezone.now() + timedelta(seconds=30))
    retrying = Run.objects.create(job=job, scheduled_at=timezone.now() - timedelta(minutes=3),
                                  run_at=timezone.now() + timedelta(seconds=5),
                                  state=RunState.RETRYING, attempt=1)

    before = timezone.now()
    response = api.patch(f"/api/jobs/{job.pk}/", {"schedule": "0 9 * * 1-5",
                                                  "timezone": "Asia/Tokyo"}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["schedule"], body["timezone"]) == ("0 9 * * 1-5", "Asia/Tokyo")
    next_run = datetime.fromisoformat(body["next_run_at"])
    assert next_run == cron.next_after("0 9 * * 1-5", "Asia/Tokyo", before)
    assert next_run.astimezone(cron.zone("Asia/Tokyo")).hour == 9
    assert Run.objects.get(pk=ahead.pk).state == RunState.CANCELLED
    assert Run.objects.get(pk=retrying.pk).state == RunState.RETRYING


def test_changing_payload_priority_limits_and_policy_keeps_next_run(api, alice):
    set_owner_policy(alice, highest_priority=1)
    job = recurring(alice)
    next_run_at = Job.objects.get(pk=job.pk).next_run_at

    response = api.patch(f"/api/jobs/{job.pk}/", {
        "payload": {"v": 2}, "priority": 1, "timeout_s": 30, "max_retries": 0,
        "misfire_policy": "skip", "max_lag_s": 60, "name": "renamed"}, format="json")

    assert response.status_code == 200, response.content
    stored = Job.objects.select_related("schedule").get(pk=job.pk)
    assert (stored.payload, stored.priority, stored.timeout_s, stored.max_attempts) == (
        {"v": 2}, 1, 30, 1)
    assert (stored.schedule.misfire_policy, stored.schedule.max_lag_s) == ("skip", 60)
    assert stored.name == "renamed"
    assert stored.next_run_at == next_run_at


def test_moving_a_one_off_job_replaces_its_pending_run(api, alice):
    job = one_off(alice)
    old = Run.objects.get(job=job)

    response = api.patch(f"/api/jobs/{job.pk}/", {"run_at": "2031-06-01T12:00:00+02:00"},
                         format="json")

    assert response.status_code == 200, response.content
    assert response.json()["run_at"] == "2031-06-01T10:00:00Z"
    assert Run.objects.get(pk=old.pk).state == RunState.CANCELLED
    new = Run.objects.get(job=job, state=RunState.SCHEDULED)
    assert new.scheduled_at == new.run_at == datetime(2031, 6, 1, 10, tzinfo=UTC)


def test_a_one_off_job_whose_run_started_cannot_be_moved(api, alice):
    job = one_off(alice)
    Run.objects.filter(job=job).update(state=RunState.SUCCEEDED, attempt=1)

    response = api.patch(f"/api/jobs/{job.pk}/", {"run_at": "2031-06-01T12:00:00Z"},
                         format="json")

    assert response.status_code == 409
    assert "already started" in response.json()["detail"]
    assert Run.objects.filter(job=job).count() == 1


def test_delete_cancels_the_job_and_its_pending_runs_but_keeps_them(api, alice):
    job = one_off(alice)
    done = Run.objects.create(job=job, scheduled_at=timezone.now() - timedelta(hours=1),
                              run_at=timezone.now(), state=RunState.SUCCEEDED)

    response = api.delete(f"/api/jobs/{job.pk}/")

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    states = dict(Run.objects.filter(job=job).values_list("pk", "state"))
    assert states.pop(done.pk) == RunState.SUCCEEDED
    assert set(states.values()) == {RunState.CANCELLED}
    assert api.delete(f"/api/jobs/{job.pk}/").status_code == 200  # idempotent
    assert api.patch(f"/api/jobs/{job.pk}/", {"priority": 1}, format="json").status_code == 409


def test_a_cancelled_job_cannot_be_paused_resumed_or_triggered(api, alice):
    job = recurring(alice)
    api.delete(f"/api/jobs/{job.pk}/")

    for verb in ("pause", "resume", "trigger"):
        response = api.post(f"/api/jobs/{job.pk}/{verb}/")
        assert response.status_code == 409, verb
        assert "cancelled" in response.json()["detail"]


def test_trigger_creates_one_run_now(api, alice):
    job = recurring(alice, cron="0 0 1 1 *")

    response = api.post(f"/api/jobs/{job.pk}/trigger/")

    assert response.status_code == 201, response.content
    run = response.json()
    assert (run["job"], run["state"], run["attempts"]) == (job.pk, "scheduled", [])
    assert abs(datetime.fromisoformat(run["scheduled_at"]) - timezone.now()) < timedelta(
        seconds=60)
    assert Run.objects.filter(job=job).count() == 1


def test_a_paused_job_cannot_be_triggered_until_resumed(api, alice):
    job = recurring(alice)
    api.post(f"/api/jobs/{job.pk}/pause/")

    refused = api.post(f"/api/jobs/{job.pk}/trigger/")
    api.post(f"/api/jobs/{job.pk}/resume/")
    accepted = api.post(f"/api/jobs/{job.pk}/trigger/")

    assert refused.status_code == 409
    assert "paused" in refused.json()["detail"]
    assert accepted.status_code == 201


def test_bulk_creates_every_job_in_request_order(api, alice):
    set_owner_policy(alice, queues=["fast"], highest_priority=0)
    jobs = [
        {"handler": "noop", "run_at": "2030-01-01T00:00:00Z", "name": "first"},
        {"handler": "echo", "schedule": "@hourly", "timezone": "America/New_York"},
        {"handler": "noop", "run_at": "2030-01-02T00:00:00+05:30", "priority": 0,
         "max_retries": 0, "timeout_s": 5, "queue": "fast", "payload": {"i": 3}},
    ]

    response = api.post("/api/jobs/bulk/", {"jobs": jobs}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["count"] == 3
    created = {j.pk: j for j in Job.objects.select_related("schedule").filter(owner=alice)}
    first, hourly, third = (created[i] for i in body["ids"])
    assert first.name == "first"
    assert (hourly.schedule.cron, hourly.schedule.timezone) == ("0 * * * *", "America/New_York")
    assert hourly.next_run_at is not None
    assert (third.priority, third.max_attempts, third.timeout_s, third.queue, third.payload) \
        == (0, 1, 5, "fast", {"i": 3})
    assert Run.objects.filter(job__owner=alice).count() == 2


def test_bulk_takes_ten_thousand_jobs_in_one_request(api, alice):
    jobs = [{"handler": "noop", "schedule": f"{i % 60} * * * *"} if i % 2 else
            {"handler": "noop", "run_at": "2030-01-01T00:00:00Z", "payload": {"i": i}}
            for i in range(10_000)]

    response = api.post("/api/jobs/bulk/", {"jobs": jobs}, format="json")

    assert response.status_code == 201, response.content[:500]
    assert response.json()["count"] == 10_000
    assert Job.objects.filter(owner=alice).count() == 10_000
    assert Run.objects.filter(job__owner=alice).count() == 5_000
    assert not Attempt.objects.exists()


def test_the_api_root_lists_every_entry_point(api):
    response = api.get("/api/")

    assert response.status_code == 200
    links = response.json()
    assert set(links) == {"jobs", "runs", "dead-letter", "queues", "limits", "alerts",
                          "workflows", "workflow-runs", "schema", "docs"}
    for name, url in links.items():
        assert api.get(url).status_code == 200, name


def test_the_site_root_leads_to_the_admin(client):
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/admin/"


def _paused_one_off_due_while_paused(api, alice) -> Job:
    job = one_off(alice, delay_s=1)
    api.post(f"/api/jobs/{job.pk}/pause/")
    past = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(paused_at=past - timedelta(seconds=5))
    Run.objects.filter(job=job).update(scheduled_at=past, run_at=past)
    return job


def test_resume_skips_what_was_due_while_paused_unless_catch_up_says(api, alice):
    skipped = _paused_one_off_due_while_paused(api, alice)
    caught_up = _paused_one_off_due_while_paused(api, alice)

    default = api.post(f"/api/jobs/{skipped.pk}/resume/")
    latest = api.post(f"/api/jobs/{caught_up.pk}/resume/", {"catch_up": "latest"},
                      format="json")

    assert (default.status_code, latest.status_code) == (200, 200)
    # Its only run skipped, the one-off job has nothing left to run (jobs/lifecycle.py).
    assert (default.json()["status"], latest.json()["status"]) == ("finished", "active")
    [held] = Run.objects.filter(job=skipped)
    assert held.state == RunState.CANCELLED and held.error.startswith("skipped:")
    assert Run.objects.get(job=caught_up).state != RunState.CANCELLED
    run = api.get(f"/api/jobs/{skipped.pk}/runs/").json()["results"][0]
    assert (run["state"], run["error"]) == ("cancelled", held.error)


def test_resume_refuses_a_bad_catch_up_naming_it_and_changes_nothing(api, alice):
    job = _paused_one_off_due_while_paused(api, alice)

    bad = api.post(f"/api/jobs/{job.pk}/resume/", {"catch_up": "run_once"}, format="json")
    unknown = api.post(f"/api/jobs/{job.pk}/resume/", {"catchup": "all"}, format="json")

    assert bad.status_code == 400 and "catch_up" in bad.json()
    assert unknown.status_code == 400 and "catchup" in unknown.json()
    # A body that is not an object is no "default": it skipped (cancelled) the held run.
    for body in ("[]", "null", "false"):
        garbage = api.post(f"/api/jobs/{job.pk}/resume/", body,
                           content_type="application/json")
        assert garbage.status_code == 400, (body, garbage.content)
    assert Job.objects.get(pk=job.pk).status == "paused"
    assert Run.objects.get(job=job).state != RunState.CANCELLED


def test_a_paused_job_says_since_when(api, alice):
    job = recurring(alice)

    paused = api.post(f"/api/jobs/{job.pk}/pause/").json()
    resumed = api.post(f"/api/jobs/{job.pk}/resume/").json()

    assert abs(datetime.fromisoformat(paused["paused_at"]) - timezone.now()) < timedelta(
        seconds=60)
    assert resumed["paused_at"] is None
    api.post(f"/api/jobs/{job.pk}/pause/")
    assert api.delete(f"/api/jobs/{job.pk}/").json()["paused_at"] is None  # cancelled


def test_the_create_example_of_docs_api_shows_every_field_the_answer_has(api, alice):
    """docs/api.md's "Create" example lists what the API answers, field for field."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    section = text.split("### Create: `POST /api/jobs/`", 1)[1]
    example = json.loads(re.search(r"^\{\n.*?^\}$", section, re.S | re.M).group(0))
    answer = api.post("/api/jobs/", {"handler": "echo", "cron": "30 2 * * *"},
                      format="json")

    assert answer.status_code == 201, answer.content
    assert list(example) == list(answer.json())
