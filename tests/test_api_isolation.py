"""Owner isolation: another owner's job or run answers 404 on every endpoint and verb,
exactly as a missing id does, and nothing of theirs changes; lists never show it; users
with the model permissions see and act on everything (tests/test_api_permissions.py);
nothing but the probes answers without a login."""

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest
from rest_framework.test import APIClient

from jobs.models import Job
from jobs.tenants import set_owner_policy
from runs.models import Run, RunState
from tests.test_api_helpers import client_for, finished_run, one_off, recurring, user_with

pytestmark = pytest.mark.django_db

MISSING = 987_654_321
OPERATOR = ("jobs.change_job", "runs.change_run")  # the model permissions that act on all
# (method, path template, body): {job} / {run} are the other owner's ids.
BY_ID = [
    ("get", "/api/jobs/{job}/", None),
    ("patch", "/api/jobs/{job}/", {"priority": 4}),
    ("delete", "/api/jobs/{job}/", None),
    ("get", "/api/jobs/{job}/runs/", None),
    ("post", "/api/jobs/{job}/pause/", None),
    ("post", "/api/jobs/{job}/resume/", None),
    ("post", "/api/jobs/{job}/trigger/", None),
    ("get", "/api/runs/{run}/", None),
    ("get", "/api/runs/{run}/logs/", None),
    ("post", "/api/runs/{run}/retry/", None),
    ("post", "/api/runs/{run}/cancel/", None),
    ("get", "/api/dead-letter/{run}/", None),
]
LISTS = ["/api/jobs/", "/api/runs/", "/api/dead-letter/", "/api/queues/"]


@pytest.fixture
def bob():
    user = User.objects.create_user("bob")
    set_owner_policy(user, queues=["bob-queue"])  # his tenant queue
    return user


@pytest.fixture
def bobs(bob):
    """Bob's recurring job, his one-off job with a pending run, and a dead run with logs."""
    cron_job = recurring(bob, queue="bob-queue")
    pending_job = one_off(bob, queue="bob-queue")
    dead = finished_run(cron_job)
    return {"job": cron_job, "pending_job": pending_job, "run": dead}


def snapshot():
    return (sorted(Job.objects.values_list("id", "status", "priority", "updated_at")),
            sorted(Run.objects.values_list("id", "state", "attempt", "max_attempts")))


def call(client, method, template, body, job, run):
    path = template.format(job=job, run=run)
    return getattr(client, method)(path, body, format="json") if body else \
        getattr(client, method)(path)


@pytest.mark.parametrize("method, template, body", BY_ID,
                         ids=[f"{m.upper()} {t}" for m, t, _ in BY_ID])
def test_another_owners_id_answers_404_like_a_missing_one_and_changes_nothing(
        bobs, method, template, body):
    alice = client_for(User.objects.create_user("alice"))
    before = snapshot()

    theirs = call(alice, method, template, body, bobs["job"].pk, bobs["run"].pk)
    missing = call(alice, method, template, body, MISSING, MISSING)

    assert theirs.status_code == 404, theirs.content
    assert missing.status_code == 404
    assert theirs.json().keys() == missing.json().keys() == {"detail"}
    assert snapshot() == before


@pytest.mark.parametrize("path", LISTS)
def test_lists_and_filters_never_show_another_owners_jobs_or_runs(bobs, path):
    alice_user = User.objects.create_user("alice")
    alice = client_for(alice_user)
    recurring(alice_user)
    finished_run(one_off(alice_user))

    listed = alice.get(path).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    # The job list has no job filter: a 400 naming it (scheduler_core/rest/query_params.py), never
    # bob's.
    by_job = alice.get(path, {"job": bobs["job"].pk}).json()
    by_job_rows = by_job.get("results", []) if isinstance(by_job, dict) else by_job

    # A row's job: its "job" (run lists) or its "id" (the job list). Job and run ids come
    # from different sequences, so a job id is compared with job ids only.
    assert all(row.get("job", row.get("id")) not in
               {bobs["job"].pk, bobs["pending_job"].pk} for row in rows)
    assert all(row.get("id") != bobs["run"].pk for row in rows if "job" in row)
    assert all(row.get("queue") != "bob-queue" for row in rows)
    if path != "/api/queues/":
        assert all(row.get("job") != bobs["job"].pk for row in by_job_rows)


def test_a_jobs_runs_list_filtered_to_another_owners_job_is_empty(bobs):
    alice = client_for(User.objects.create_user("alice"))

    response = alice.get("/api/runs/", {"job": bobs["job"].pk})

    assert response.status_code == 200
    assert response.json()["results"] == []


@pytest.mark.parametrize("method, template, body", BY_ID,
                         ids=[f"{m.upper()} {t}" for m, t, _ in BY_ID])
def test_operators_see_and_act_on_every_owners_jobs_and_runs(bobs, method, template, body):
    staff = client_for(user_with("ops", *OPERATOR))

    response = call(staff, method, template, body, bobs["job"].pk, bobs["run"].pk)

    # 409 is a state conflict (e.g. resuming a job that is not paused); never a 404.
    assert response.status_code in (200, 201, 409), response.content
    assert response.status_code != 404


def test_operators_lists_show_every_owner(bobs):
    staff = client_for(user_with("ops", "jobs.view_job", "runs.view_run"))

    jobs = staff.get("/api/jobs/").json()["results"]

    assert {j["id"] for j in jobs} >= {bobs["job"].pk, bobs["pending_job"].pk}
    assert staff.get("/api/dead-letter/").json()["results"][0]["id"] == bobs["run"].pk


def test_a_job_cannot_be_created_for_someone_else(bob):
    alice_user = User.objects.create_user("alice")
    alice = client_for(alice_user)

    response = alice.post("/api/jobs/", {"handler": "noop", "schedule": "@daily",
                                         "owner": "bob"}, format="json")

    assert response.status_code == 400
    assert "owner" in response.json()
    assert not Job.objects.filter(owner=bob).exists()


@pytest.mark.parametrize("path", [*LISTS, "/api/jobs/1/", "/api/runs/1/", "/api/runs/1/logs/",
                                  "/api/jobs/1/runs/", "/api/dead-letter/1/", "/api/schema/",
                                  "/api/docs/"])
def test_every_endpoint_needs_a_login(path):
    assert APIClient().get(path).status_code == 401


def test_a_wrong_token_is_refused():
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")

    assert api.get("/api/jobs/").status_code == 401


def test_the_probes_answer_without_a_login():
    anonymous = APIClient()

    assert anonymous.get("/healthz").status_code == 200
    assert anonymous.get("/readyz").status_code == 200


def test_readyz_names_the_dependency_that_is_down_not_its_address(monkeypatch, caplog):
    from jobs.api import jobs as api
    from runs.brokers.redis import RedisBroker

    down = RedisBroker(url="redis://:hunter2@127.0.0.1:1/0")
    monkeypatch.setattr(api, "get_broker", lambda: down)
    response = APIClient().get("/readyz")

    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable", "broker": "unavailable (the reason is in the server's log)"}
    assert "127.0.0.1:1" in caplog.text  # where it lives is for the operator's log only


def test_a_run_already_dead_stays_dead_after_another_owners_retry(bobs):
    alice = client_for(User.objects.create_user("alice"))

    alice.post(f"/api/runs/{bobs['run'].pk}/retry/")

    assert Run.objects.get(pk=bobs["run"].pk).state == RunState.DEAD


def test_a_session_login_works_and_its_writes_need_the_csrf_token():
    User.objects.create_user("alice", password="pw")
    browser = APIClient(enforce_csrf_checks=True)

    assert browser.get("/api/auth/login/").status_code == 200
    assert browser.login(request=HttpRequest(), username="alice", password="pw")
    listed = browser.get("/api/jobs/")
    refused = browser.post("/api/jobs/", {"handler": "noop", "schedule": "@daily"},
                           format="json")

    assert listed.status_code == 200
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert not Job.objects.exists()
