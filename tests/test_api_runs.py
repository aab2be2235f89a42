"""The runs endpoints: list (filters, ordering, cursor pagination), detail with attempts,
logs (level and text filters), retry, cancel, the dead letter and the queue figures."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from jobs.models import Job
from jobs.tenants import set_owner_policy
from runs.brokers import get_broker
from runs.execution.transitions import run_refs
from runs.models import Run, RunState, WorkerProcess
from tests.conftest import flush_redis
from tests.test_api_helpers import client_for, finished_run, one_off, recurring, user_with

pytestmark = pytest.mark.django_db


def make_runs(job, count, state=RunState.SCHEDULED, start=None, queue="default"):
    start = start or timezone.now()
    return Run.objects.bulk_create([
        Run(job=job, scheduled_at=start + timedelta(minutes=i), run_at=start, state=state,
            queue=queue) for i in range(count)])


def test_runs_are_listed_newest_first_through_a_cursor(api, alice):
    job = recurring(alice)
    runs = make_runs(job, 7)

    first = api.get("/api/runs/", {"page_size": 3}).json()
    second = api.get(first["next"]).json()
    third = api.get(second["next"]).json()

    newest_first = [r.pk for r in runs[::-1]]
    assert [r["id"] for r in first["results"] + second["results"] + third["results"]] == \
        newest_first
    assert third["next"] is None
    assert "count" not in first  # no COUNT(*) over a table that grows without bound
    assert api.get("/api/runs/", {"cursor": "bogus"}).status_code == 404


def test_runs_filter_by_job_state_queue_handler_and_time_ranges(api, alice):
    start = timezone.now().replace(microsecond=0)
    set_owner_policy(alice, queues=["slow"])
    a, b = recurring(alice), one_off(alice, queue="slow")
    a_runs = make_runs(a, 3, start=start)
    dead = finished_run(a)
    b_run = Run.objects.get(job=b)

    def ids(**query):
        response = api.get("/api/runs/", query)
        assert response.status_code == 200, response.content
        return {r["id"] for r in response.json()["results"]}

    assert ids(job=a.pk) == {r.pk for r in a_runs} | {dead.pk}
    assert ids(state="dead") == {dead.pk}
    assert ids(state=["dead", "scheduled"], job=a.pk) == {r.pk for r in a_runs} | {dead.pk}
    assert ids(queue="slow") == {b_run.pk}
    assert ids(handler="noop") == {b_run.pk}
    after = (start + timedelta(minutes=1)).isoformat()
    before = (start + timedelta(minutes=2)).isoformat()
    assert ids(scheduled_after=after, scheduled_before=before) == {a_runs[1].pk}
    assert ids(finished_after=(timezone.now() - timedelta(hours=1)).isoformat()) == {dead.pk}
    assert ids(finished_before="2000-01-01T00:00:00+00:00") == set()
    assert api.get("/api/runs/", {"state": "asleep"}).status_code == 400
    assert api.get("/api/runs/", {"scheduled_after": "yesterday"}).status_code == 400


def test_runs_order_by_the_documented_fields(api, alice):
    runs = make_runs(recurring(alice), 3)

    ascending = api.get("/api/runs/", {"ordering": "scheduled_at"}).json()["results"]
    by_id = api.get("/api/runs/", {"ordering": "-id"}).json()["results"]

    assert [r["id"] for r in ascending] == [r.pk for r in runs]
    assert [r["id"] for r in by_id] == [r.pk for r in runs[::-1]]


def test_a_jobs_runs_are_its_own_only(api, alice):
    job, other = recurring(alice), recurring(alice)
    mine = make_runs(job, 2)
    make_runs(other, 2)

    response = api.get(f"/api/jobs/{job.pk}/runs/", {"state": "scheduled"})

    assert {r["id"] for r in response.json()["results"]} == {r.pk for r in mine}


def test_a_run_shows_its_attempts_and_lag(api, alice):
    run = finished_run(recurring(alice), attempts=2)

    body = api.get(f"/api/runs/{run.pk}/").json()

    assert [a["number"] for a in body["attempts"]] == [1, 2]
    assert body["attempts"][1]["outcome"] == "failed"
    assert body["lag_s"] == 1.0
    assert body["handler"] == "echo"


def test_logs_of_every_attempt_filter_by_level_text_and_attempt(api, alice):
    run = finished_run(recurring(alice), attempts=2)

    def messages(**query):
        response = api.get(f"/api/runs/{run.pk}/logs/", query)
        assert response.status_code == 200, response.content
        return [line["message"] for line in response.json()["results"]]

    assert messages() == ["starting (try 1)", "disk almost full (try 1)", "boom (try 1)",
                          "starting (try 2)", "disk almost full (try 2)", "boom (try 2)"]
    assert messages(level="warning") == ["disk almost full (try 1)", "boom (try 1)",
                                         "disk almost full (try 2)", "boom (try 2)"]
    assert messages(level="ERROR", attempt=2) == ["boom (try 2)"]
    assert messages(level="40") == ["boom (try 1)", "boom (try 2)"]
    assert messages(q="DISK") == ["disk almost full (try 1)", "disk almost full (try 2)"]
    line = api.get(f"/api/runs/{run.pk}/logs/", {"page_size": 1}).json()
    assert line["results"][0]["level_name"] == "INFO"
    assert line["results"][0]["attempt"] == 1
    assert line["next"]
    assert api.get(f"/api/runs/{run.pk}/logs/", {"level": "loud"}).status_code == 400


def test_retry_requeues_a_dead_run_with_a_fresh_attempt_budget(api, alice):
    run = finished_run(recurring(alice, max_attempts=3), attempts=3)

    response = api.post(f"/api/runs/{run.pk}/retry/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["state"], body["attempt"], body["max_attempts"], body["error"]) == (
        "scheduled", 3, 6, "")
    assert api.get("/api/dead-letter/").json()["results"] == []


def test_retry_refuses_a_run_that_is_not_dead_or_whose_job_is_paused(api, alice):
    job = recurring(alice)
    [pending] = make_runs(job, 1)
    dead = finished_run(job)
    api.post(f"/api/jobs/{job.pk}/pause/")

    not_dead = api.post(f"/api/runs/{pending.pk}/retry/")
    paused = api.post(f"/api/runs/{dead.pk}/retry/")

    assert not_dead.status_code == 409
    assert "only dead or cancelled" in not_dead.json()["detail"]
    assert paused.status_code == 409
    assert "paused" in paused.json()["detail"]
    assert Run.objects.get(pk=dead.pk).state == RunState.DEAD


def test_cancel_stops_a_pending_run_and_refuses_a_finished_one(api, alice):
    job = recurring(alice)
    [pending] = make_runs(job, 1)
    done = finished_run(job, state=RunState.SUCCEEDED)

    cancelled = api.post(f"/api/runs/{pending.pk}/cancel/")
    refused = api.post(f"/api/runs/{done.pk}/cancel/")

    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    assert refused.status_code == 409
    assert "succeeded" in refused.json()["detail"]
    assert Job.objects.get(pk=job.pk).status == "active"


def test_the_dead_letter_lists_dead_runs_with_the_reason_each_died(api, alice):
    job = recurring(alice, name="nightly")
    dead = finished_run(job, attempts=4, error="Traceback (most recent call last):\n  ...\n"
                        "TimeoutError: took too long", outcome="timed_out")
    finished_run(job, state=RunState.SUCCEEDED)

    body = api.get("/api/dead-letter/").json()

    [row] = body["results"]
    assert row["id"] == dead.pk
    assert (row["job"], row["job_name"], row["handler"]) == (job.pk, "nightly", "echo")
    assert row["reason"] == "4 of 4 attempts used; last attempt: Timed Out: " \
        "TimeoutError: took too long"
    assert row["error"].endswith("TimeoutError: took too long")
    assert (row["last_attempt"]["number"], row["last_attempt"]["outcome"]) == (4, "timed_out")
    assert api.get("/api/dead-letter/", {"handler": "noop"}).json()["results"] == []
    assert api.get(f"/api/dead-letter/{dead.pk}/").json()["id"] == dead.pk


@pytest.mark.django_db(transaction=True)
def test_queues_show_depth_oldest_ready_age_and_live_workers():
    flush_redis()
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    staff = client_for(user_with("ops", "runs.view_run"))
    set_owner_policy(alice, queues=["mail"])
    set_owner_policy(bob, queues=["bob-only"])
    due = one_off(alice, delay_s=0, queue="mail")
    # Made and due 30 s ago: a due run's wait counts from the later of the two.
    thirty_s_ago = timezone.now() - timedelta(seconds=30)
    Run.objects.filter(job=due).update(run_at=thirty_s_ago, created_at=thirty_s_ago)
    one_off(alice, delay_s=3600, queue="mail")
    one_off(bob, delay_s=3600, queue="bob-only")
    broker = get_broker()
    broker.push(run_refs(Run.objects.all()))
    broker.promote()  # the due run went straight to ready; its row may still say scheduled
    now = timezone.now()
    WorkerProcess.objects.create(worker_id="w1", hostname="h", pid=1, queues=["mail"],
                                 concurrency=2, started_at=now, last_heartbeat_at=now)

    mine = {q["queue"]: q for q in client_for(alice).get("/api/queues/").json()}
    everyone = {q["queue"] for q in staff.get("/api/queues/").json()}

    assert set(mine) == {"mail"}
    assert (mine["mail"]["ready"], mine["mail"]["delayed"], mine["mail"]["leased"]) == (1, 1, 0)
    assert mine["mail"]["oldest_ready_age_s"] >= 29
    assert mine["mail"]["live_workers"] == 1
    assert everyone == {"mail", "bob-only"}
    flush_redis()


def test_a_forged_cursor_is_a_404_not_a_500(api):
    forged = "cD1ub3RhZGF0ZQ%3D%3D"  # base64 of "p=notadate"

    response = api.get(f"/api/runs/?cursor={forged}")

    assert response.status_code == 404


@pytest.mark.postgresql_only("the prune is slipped in at the requeue's SELECT ... FOR "
                             "UPDATE, which SQLite (one writer at a time) never sends")
def test_retry_of_a_run_pruned_meanwhile_answers_404_not_a_conflict(api, alice):
    # Found by an adversarial review: a run pruned (docs/retention.md) between the
    # view's read and the requeue got 409 "its job is active; resume the job first".
    from django.db import connection

    run = finished_run(recurring(alice))
    pruned = []

    def prune_first(execute, sql, params, many, context):
        if not pruned and "FOR UPDATE" in sql and 'FROM "runs_run"' in sql:
            pruned.append(True)
            Run.objects.filter(pk=run.pk).delete()
        return execute(sql, params, many, context)

    with connection.execute_wrapper(prune_first):
        response = api.post(f"/api/runs/{run.pk}/retry/")

    assert pruned
    assert response.status_code == 404, response.content
    assert "no longer exists" in response.json()["detail"]
