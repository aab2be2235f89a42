"""Idempotency-Key on POST /api/jobs/ and /api/jobs/bulk/: a retried request returns the
first response's job instead of creating a second, even when the retry races the first."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from jobs.models import IdempotencyKey, Job
from tests.test_api_helpers import client_for

JOB = {"handler": "noop", "schedule": "@daily", "payload": {"n": 1}}


@pytest.fixture
def alice(db):
    return User.objects.create_user("alice")


@pytest.fixture
def api(alice):
    return client_for(alice)


def post(api, body=JOB, key="order-42", path="/api/jobs/"):
    return api.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_a_retried_create_returns_the_first_job_and_creates_no_second(api):
    first = post(api)
    retry = post(api)

    assert first.status_code == retry.status_code == 201
    assert retry.content == first.content  # byte for byte: same fields, same order
    assert retry.headers["Location"] == first.headers["Location"]
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert Job.objects.count() == 1


def test_without_a_key_every_post_creates_a_job(api):
    api.post("/api/jobs/", JOB, format="json")
    api.post("/api/jobs/", JOB, format="json")

    assert Job.objects.count() == 2


def test_a_different_key_creates_a_new_job(api):
    post(api, key="a")
    post(api, key="b")

    assert Job.objects.count() == 2


def test_a_key_reused_with_a_different_request_is_refused(api):
    post(api)

    response = post(api, body={**JOB, "payload": {"n": 2}})

    assert response.status_code == 422
    assert "different request" in response.json()["detail"]
    assert Job.objects.count() == 1


def test_keys_belong_to_their_owner(api):
    bob = client_for(User.objects.create_user("bob"))

    mine, theirs = post(api), post(bob)

    assert mine.json()["id"] != theirs.json()["id"]
    assert theirs.json()["owner"] == "bob"
    assert Job.objects.count() == 2


def test_a_refused_request_stores_no_key_so_the_corrected_retry_runs(api):
    bad = post(api, body={**JOB, "schedule": "61 * * * *"})
    good = post(api)

    assert bad.status_code == 400
    assert good.status_code == 201
    assert "Idempotent-Replayed" not in good.headers
    assert Job.objects.count() == 1


def test_a_key_older_than_its_ttl_is_forgotten(api):
    post(api)
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(days=2))

    again = post(api)

    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again.headers
    assert Job.objects.count() == 2


def test_a_retried_bulk_create_returns_the_first_ids(api):
    body = {"jobs": [JOB, {"handler": "noop", "run_at": "2030-01-01T00:00:00Z"}]}

    first = post(api, body=body, path="/api/jobs/bulk/")
    retry = post(api, body=body, path="/api/jobs/bulk/")

    assert first.status_code == retry.status_code == 201
    assert retry.json() == first.json()
    assert Job.objects.count() == 2


def test_the_same_key_on_create_and_bulk_is_a_different_request(api):
    post(api)

    response = post(api, body={"jobs": [JOB]}, path="/api/jobs/bulk/")

    assert response.status_code == 422


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_that_arrives_while_the_first_is_in_flight_waits_and_replays():
    # Hold the first request's key row in an open transaction, as the first request does
    # while it creates its job: the duplicate must block on the unique constraint, then
    # answer with the first response once it commits.
    alice = User.objects.create_user("alice")
    first = post(client_for(alice))
    record = IdempotencyKey.objects.get()
    IdempotencyKey.objects.all().delete()
    Job.objects.all().delete()
    answers = []

    def duplicate_request():
        answers.append(post(client_for(alice)))
        connection.close()

    with transaction.atomic():
        IdempotencyKey.objects.create(owner=alice, key=record.key, path=record.path,
                                      status_code=record.status_code, response=record.response)
        duplicate = threading.Thread(target=duplicate_request)
        duplicate.start()
        duplicate.join(timeout=1.0)
        assert duplicate.is_alive(), "the duplicate did not wait for the first request"
    duplicate.join(timeout=30)

    assert answers[0].status_code == 201
    assert answers[0].json() == first.json()
    assert answers[0].headers["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 0  # the first's response was replayed; no second job


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_create_exactly_one_job():
    alice = User.objects.create_user("alice")
    clients = [client_for(alice) for _ in range(6)]
    barrier = threading.Barrier(len(clients))
    answers = []

    def send(client):
        barrier.wait()
        answers.append(post(client))
        connection.close()

    threads = [threading.Thread(target=send, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert [a.status_code for a in answers] == [201] * len(clients)
    assert len({a.json()["id"] for a in answers}) == 1
    assert Job.objects.count() == 1


def test_the_idempotency_window_is_a_tunable(api):
    post(api)
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(seconds=120))

    with override_settings(SCHEDULER={"IDEMPOTENCY_TTL_S": 3600}):
        replay = post(api)

    assert replay.headers["Idempotent-Replayed"] == "true"
