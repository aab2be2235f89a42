"""Unique jobs (jobs/ingest/unique.py; docs/api.md, "Unique jobs"): a key, a period and the run
states that count; a conflict answers the job holding the key, flagged; the database
enforces it, in REST, bulk and the Python API."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from jobs import services
from jobs.models import Job
from runs.models import Run, RunState
from scheduler_core.exceptions import InvalidJob
from tests.test_api_helpers import client_for

pytestmark = pytest.mark.django_db

KEYED = {"handler": "noop", "run_at": "2030-01-01T00:00:00Z", "unique_key": "invoice-42"}


def test_a_second_create_with_the_key_answers_the_first_job_flagged(api):
    first = api.post("/api/jobs/", KEYED, format="json")
    second = api.post("/api/jobs/", {**KEYED, "payload": {"other": 1}}, format="json")

    assert first.status_code == 201 and first.json()["conflict"] is False
    assert second.status_code == 200, second.json()
    assert second.json()["conflict"] is True
    assert second.json()["id"] == first.json()["id"]
    assert second.json()["payload"] == {}  # the existing job, not the new request
    assert second["Location"] == f"/api/jobs/{first.json()['id']}/"
    assert Job.objects.filter(unique_key="invoice-42").count() == 1


def test_the_key_counts_only_in_the_states_given(api):
    job_id = api.post("/api/jobs/", KEYED, format="json").json()["id"]
    Run.objects.filter(job_id=job_id).update(state=RunState.SUCCEEDED)

    # Default states: the unfinished ones. A finished job frees its key.
    again = api.post("/api/jobs/", KEYED, format="json")
    assert again.status_code == 201 and again.json()["id"] != job_id

    keep = {**KEYED, "unique_key": "daily", "unique_states": ["queued", "succeeded"]}
    kept_id = api.post("/api/jobs/", keep, format="json").json()["id"]
    Run.objects.filter(job_id=kept_id).update(state=RunState.SUCCEEDED)
    assert api.post("/api/jobs/", keep, format="json").json()["id"] == kept_id


def test_the_key_counts_for_its_period_only(api):
    spec = {**KEYED, "unique_period_s": 60}
    job_id = api.post("/api/jobs/", spec, format="json").json()["id"]
    assert api.post("/api/jobs/", spec, format="json").json()["conflict"] is True

    Job.objects.filter(pk=job_id).update(unique_until=timezone.now() - timedelta(seconds=1))
    after = api.post("/api/jobs/", spec, format="json")
    assert after.status_code == 201 and after.json()["id"] != job_id


def test_cancelling_the_job_frees_its_key_and_owners_do_not_share_keys(api, alice):
    job_id = api.post("/api/jobs/", KEYED, format="json").json()["id"]
    bob = client_for(User.objects.create_user("bob"))
    assert bob.post("/api/jobs/", KEYED, format="json").status_code == 201

    api.delete(f"/api/jobs/{job_id}/")
    assert api.post("/api/jobs/", KEYED, format="json").status_code == 201


def test_bulk_answers_each_conflicting_item_with_the_holder(api):
    existing = api.post("/api/jobs/", KEYED, format="json").json()["id"]
    items = [KEYED, {**KEYED, "unique_key": "b"}, {"handler": "noop", "run_at": None,
                                                   "schedule": "@daily"},
             {**KEYED, "unique_key": "b"}]
    answer = api.post("/api/jobs/bulk/", {"jobs": items}, format="json")

    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["conflicts"] == [0, 3] and body["count"] == 2
    assert body["ids"][0] == existing and body["ids"][3] == body["ids"][1]
    assert Job.objects.filter(unique_key="b").count() == 1


def test_the_python_api_returns_the_holder_and_bad_fields_are_named(api):
    first = services.create_job("noop", delay_s=60, unique_key="k", unique_period_s=30)
    second = services.create_job("noop", delay_s=0, unique_key="k")
    assert (first.conflict, second.conflict, second.pk) == (False, True, first.pk)

    base = {"handler": "noop", "run_at": "2030-01-01T00:00:00Z"}
    bad = api.post("/api/jobs/", {**base, "unique_key": "k", "unique_states": ["later"]},
                   format="json")
    assert bad.status_code == 400 and set(bad.json()) == {"unique_states"}, bad.json()
    keyless = api.post("/api/jobs/", {**base, "unique_period_s": 60}, format="json")
    assert keyless.status_code == 400
    assert keyless.json() == {"unique_period_s": ["needs a unique_key"]}
    assert Job.objects.count() == 1


def test_the_database_refuses_a_second_holder_of_a_key():
    services.create_job("noop", delay_s=0, unique_key="k")
    clone = Job(name="x", handler="noop", run_at=timezone.now(), unique_lock="-:k")
    with pytest.raises(IntegrityError), transaction.atomic():
        clone.save()


@pytest.mark.django_db(transaction=True)
def test_racing_creates_make_one_job():
    """Eight threads create the same keyed job at once: one job, every answer it."""
    start = threading.Barrier(8)
    answers, errors = [], []

    def create():
        try:
            start.wait()
            answers.append(services.create_job("noop", delay_s=0, unique_key="race").pk)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert Job.objects.filter(unique_key="race").count() == 1
    assert set(answers) == {Job.objects.get(unique_key="race").pk}


def test_a_period_past_the_rest_bound_is_a_field_error_through_python_too(api):
    # The REST field stops at a PostgreSQL integer; the Python API overflowed the date.
    with pytest.raises(InvalidJob) as exc:
        services.create_job("noop", unique_key="k", unique_period_s=10**12)
    assert set(exc.value.errors) == {"unique_period_s"}
    assert Job.objects.count() == 0


def test_a_state_given_many_times_counts_once(api):
    # The states are stored joined in a 100-character column: repeats overflowed it (500).
    base = {"handler": "noop", "run_at": "2030-01-01T00:00:00Z", "unique_key": "k"}
    single = api.post("/api/jobs/", {**base, "unique_states": ["scheduled"] * 30},
                      format="json")
    assert single.status_code == 201, single.content
    bulk = api.post("/api/jobs/bulk/", {"jobs": [{**base, "unique_key": "k2",
                                                  "unique_states": ["queued", "scheduled"] * 20}]},
                    format="json")
    assert bulk.status_code == 201, bulk.content
    assert sorted(Job.objects.values_list("unique_states", flat=True)) == [
        "scheduled", "scheduled,queued"]
    again = api.post("/api/jobs/", {**base, "unique_states": ["scheduled"]}, format="json")
    assert again.status_code == 200 and again.json()["conflict"] is True
