"""The seed REST API: create, retrieve, runs, pause, resume; owner isolation; probes."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from jobs.models import Job, Schedule
from runs.models import Run
from scheduler_core.rest.tokens import create_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def client(alice):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {create_token(alice)}")
    return api


def test_creating_a_cron_job_returns_it_with_its_next_run(client):
    response = client.post("/api/jobs/", {
        "name": "nightly report", "handler": "echo", "schedule": "30 2 * * *",
        "timezone": "Europe/Berlin", "payload": {"report": "sales"}, "priority": 3,
        "timeout_s": 120, "max_retries": 2,
    }, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["schedule"] == "30 2 * * *"
    assert body["timezone"] == "Europe/Berlin"
    assert body["max_retries"] == 2
    assert body["owner"] == "alice"
    assert body["next_run_at"].endswith(("T01:30:00Z", "T00:30:00Z"))
    assert client.get(f"/api/jobs/{body['id']}/").json()["name"] == "nightly report"


def test_creating_a_one_off_job_creates_its_run(client):
    response = client.post("/api/jobs/", {
        "handler": "noop", "run_at": "2030-01-01T09:00:00+01:00"}, format="json")

    assert response.status_code == 201, response.content
    runs = client.get(f"/api/jobs/{response.json()['id']}/runs/").json()["results"]
    assert [(r["scheduled_at"], r["state"], r["attempts"]) for r in runs] == [
        ("2030-01-01T08:00:00Z", "scheduled", [])]


@pytest.mark.parametrize("body, field", [
    ({"handler": "nope", "run_at": "2030-01-01T00:00:00Z"}, "handler"),
    ({"handler": "noop", "run_at": "2030-01-01T00:00:00"}, "run_at"),
    ({"handler": "noop", "delay_s": 5, "run_at": "2030-01-01T00:00:00Z"}, "delay_s"),
    ({"handler": "noop", "schedule": "* * * * *", "run_at": "2030-01-01T00:00:00Z"},
     "schedule"),
    ({"handler": "noop", "schedule": "61 * * * *"}, "schedule"),
    ({"handler": "noop", "schedule": "@reboot"}, "schedule"),
    ({"handler": "noop", "schedule": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ({"handler": "noop", "schedule": "* * * * *", "priority": 10}, "priority"),
    ({"handler": "noop", "schedule": "* * * * *", "timeout_s": 0}, "timeout_s"),
    ({"handler": "noop", "schedule": "* * * * *", "max_retries": -1}, "max_retries"),
    ({"handler": "noop", "schedule": "* * * * *", "queue": "no spaces"}, "queue"),
    ({"handler": "noop", "schedule": "* * * * *", "colour": "red"}, "colour"),
])
def test_a_bad_job_is_refused_naming_the_field_and_nothing_is_stored(client, body, field):
    response = client.post("/api/jobs/", body, format="json")

    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert (Job.objects.count(), Schedule.objects.count(), Run.objects.count()) == (0, 0, 0)


def test_pause_and_resume(client):
    job_id = client.post("/api/jobs/", {"handler": "noop", "schedule": "* * * * *"},
                         format="json").json()["id"]

    assert client.post(f"/api/jobs/{job_id}/pause/").json()["status"] == "paused"
    assert client.post(f"/api/jobs/{job_id}/resume/").json()["status"] == "active"


def test_another_owners_job_answers_404_and_staff_see_it(client):
    bob = User.objects.create_user("bob")
    bobs = Job.objects.create(name="b", owner=bob, handler="noop",
                              schedule=Schedule.objects.create(cron="* * * * *"))

    for method, path in [("get", ""), ("get", "runs/"), ("post", "pause/"), ("post", "resume/")]:
        assert getattr(client, method)(f"/api/jobs/{bobs.pk}/{path}").status_code == 404
    assert client.get("/api/jobs/").json()["count"] == 0

    staff = APIClient()
    staff.force_authenticate(User.objects.create_superuser("ops"))
    assert staff.get(f"/api/jobs/{bobs.pk}/").status_code == 200


def test_the_api_needs_a_login_but_the_probes_do_not():
    anonymous = APIClient()
    assert anonymous.get("/api/jobs/").status_code == 401
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    ready = anonymous.get("/readyz")
    assert ready.status_code == 200, ready.content
    assert ready.json()["broker"] == "redis"
