"""Every validation rule of the jobs API: a 400 naming the field and the reason, and
nothing stored (POST), nothing changed (PATCH), nothing of the batch stored (bulk)."""

import json

import pytest
from django.test import override_settings

from jobs.models import IdempotencyKey, Job, Schedule
from runs.models import Run
from tests.test_api_helpers import one_off, recurring

pytestmark = pytest.mark.django_db

CRON = {"handler": "noop", "cron": "*/5 * * * *"}
ONE_OFF = {"handler": "noop", "run_at": "2030-01-01T09:00:00+01:00"}
KIB = 1024

# (body, field, words the reason must contain)
BAD = [
    # cron expression
    ({"handler": "noop", "cron": "61 * * * *"}, "cron", "minute"),
    ({"handler": "noop", "cron": "* * * *"}, "cron", "5 fields"),
    ({"handler": "noop", "cron": "* * 31 2 *"}, "cron", "never fires"),
    ({"handler": "noop", "cron": "@reboot"}, "cron", "@reboot"),
    ({"handler": "noop", "cron": "*/0 * * * *"}, "cron", "minute"),
    ({"handler": "noop", "cron": "x" * 201}, "cron", "200"),
    # IANA timezone
    ({**CRON, "timezone": "Mars/Olympus"}, "timezone", "IANA"),
    ({**CRON, "timezone": "Europe"}, "timezone", "IANA"),
    ({**CRON, "timezone": "utc"}, "timezone", "IANA"),
    ({**CRON, "timezone": "+01:00"}, "timezone", "IANA"),
    # run_at: ISO 8601 with an offset
    ({"handler": "noop", "run_at": "2030-01-01T09:00:00"}, "run_at", "offset"),
    ({"handler": "noop", "run_at": "2030-01-01"}, "run_at", "offset"),
    ({"handler": "noop", "run_at": "next tuesday"}, "run_at", "format"),
    ({"handler": "noop", "run_at": 1893456000}, "run_at", "format"),
    ({"handler": "noop", "run_at": "0001-01-01T00:00:00+14:00"}, "run_at", "out of range"),
    # two of run_at, delay_s and cron (none of them means now: test_api_run_now.py)
    ({**CRON, "run_at": "2030-01-01T00:00:00Z"}, "cron", "at most one"),
    ({**CRON, "run_at": "2030-01-01T00:00:00Z"}, "run_at", "at most one"),
    ({"handler": "noop", "run_at": "2030-01-01T00:00:00Z", "delay_s": 1}, "delay_s",
     "not run_at and delay_s"),
    # handler
    ({**CRON, "handler": "nope"}, "handler", "no handler"),
    ({"cron": "@daily"}, "handler", "required"),
    # priority 0-9
    ({**CRON, "priority": 10}, "priority", "9"),
    ({**CRON, "priority": -1}, "priority", "0"),
    ({**CRON, "priority": "high"}, "priority", "integer"),
    # timeout_s positive, at most the cap (86400)
    ({**CRON, "timeout_s": 0}, "timeout_s", "at least 1"),
    ({**CRON, "timeout_s": -5}, "timeout_s", "at least 1"),
    ({**CRON, "timeout_s": 86_401}, "timeout_s", "at most 86400"),
    # max_attempts 1..cap + 1 (100)
    ({**CRON, "max_attempts": 0}, "max_attempts", "at least 1"),
    ({**CRON, "max_attempts": 101}, "max_attempts", "at most 100"),
    # payload: a JSON object under the size cap, storable by PostgreSQL
    ({**CRON, "payload": "x" * 300 * KIB}, "payload", "JSON object"),
    ({**CRON, "payload": {"blob": "x" * 257 * KIB}}, "payload", "cap of 262144"),
    ({**CRON, "payload": [1, 2]}, "payload", "JSON object"),
    ({**CRON, "payload": {"text": "nul\u0000"}}, "payload", "NUL"),
    ({**CRON, "payload": {"bad\ud800": 1}}, "payload", "Unicode"),
    # queue names
    ({**CRON, "queue": "no spaces"}, "queue", "letters"),
    ({**CRON, "queue": ""}, "queue", "blank"),
    ({**CRON, "queue": "q" * 65}, "queue", "64"),
    ({**CRON, "queue": "emoji-\u2603"}, "queue", "letters"),
    # the other fields
    ({**CRON, "misfire_policy": "sometimes"}, "misfire_policy", "valid choice"),
    ({**CRON, "max_lag_s": -1}, "max_lag_s", "0"),
    ({**CRON, "name": "n" * 201}, "name", "200"),
    ({**CRON, "name": "nul\u0000"}, "name", "Null characters"),
    ({**CRON, "name": "lone \ud800"}, "name", "Unicode"),
    # unknown fields
    ({**CRON, "colour": "red"}, "colour", "unknown field"),
    ({**CRON, "cron_expr": "@daily"}, "cron_expr", "unknown field (did you mean 'cron'?)"),
    ({**CRON, "timezone_name": "UTC"}, "timezone_name", "did you mean 'timezone'?"),
    ({**CRON, "retries": 3}, "retries", "did you mean 'max_attempts'?"),
    ({**CRON, "colour": "red", "max_tries": 3}, "max_tries", "did you mean 'max_attempts'?"),
    ({**CRON, "delay": 5}, "delay", "did you mean 'delay_s'?"),
    ({**CRON, "tz": "UTC"}, "tz", "did you mean 'timezone'?"),
]


def stored():
    return (Job.objects.count(), Schedule.objects.count(), Run.objects.count(),
            IdempotencyKey.objects.count())


@pytest.mark.parametrize("body, field, reason", BAD, ids=[f"{f}-{i}" for i, (_, f, _) in
                                                          enumerate(BAD)])
def test_a_bad_job_is_a_400_naming_the_field_and_reason_and_nothing_is_stored(
        api, body, field, reason):
    # json.dumps escapes lone surrogates (\\ud800) as a JSON client would send them.
    response = api.generic("POST", "/api/jobs/", json.dumps(body),
                           content_type="application/json", HTTP_IDEMPOTENCY_KEY="k1")

    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert reason.lower() in " ".join(errors[field]).lower(), errors
    assert stored() == (0, 0, 0, 0)


def test_every_bad_field_is_named_at_once(api):
    response = api.post("/api/jobs/", {"handler": "noop", "cron": "* * * *",
                                       "priority": 12, "queue": "a b", "colour": "red"},
                        format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"cron", "priority", "queue", "colour"}


def test_the_caps_are_tunables(api):
    with override_settings(SCHEDULER={"MAX_TIMEOUT_S": 60, "MAX_RETRIES": 2,
                                      "MAX_PAYLOAD_BYTES": 100}):
        too_long = api.post("/api/jobs/", {**CRON, "timeout_s": 61}, format="json")
        too_many = api.post("/api/jobs/", {**CRON, "max_attempts": 4}, format="json")
        too_big = api.post("/api/jobs/", {**CRON, "payload": {"x": "y" * 100}}, format="json")
        fine = api.post("/api/jobs/", {**CRON, "timeout_s": 60, "max_attempts": 3,
                                       "payload": {"x": "y"}}, format="json")

    assert too_long.json() == {"timeout_s": ["must be at most 60"]}
    assert too_many.json() == {"max_attempts": ["must be at most 3"]}
    assert "cap of 100" in too_big.json()["payload"][0]
    assert fine.status_code == 201, fine.content
    assert Job.objects.count() == 1


def test_a_payload_at_the_cap_is_accepted(api):
    filler = 256 * KIB - len('{"blob":""}')

    response = api.post("/api/jobs/", {**CRON, "payload": {"blob": "x" * filler}},
                        format="json")

    assert response.status_code == 201, response.content[:200]


def test_a_body_over_the_request_cap_is_a_413_and_nothing_is_stored(api):
    with override_settings(SCHEDULER={"API_MAX_BODY_BYTES": 1000}):
        response = api.post("/api/jobs/", {**CRON, "payload": {"x": "y" * 2000}},
                            format="json")

    assert response.status_code == 413
    assert "1000" in response.json()["detail"]
    assert stored() == (0, 0, 0, 0)


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2", b"[" * 100_000 + b"]" * 100_000])
def test_a_body_that_is_not_json_is_a_400(api, body):
    response = api.generic("POST", "/api/jobs/", body, content_type="application/json")

    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_a_form_body_is_refused_as_unsupported(api):
    response = api.post("/api/jobs/", {"handler": "noop", "cron": "@daily"})

    assert response.status_code == 415


@pytest.mark.parametrize("change, field", [
    ({"cron": "61 * * * *"}, "cron"),
    ({"timezone": "Atlantis/Central"}, "timezone"),
    ({"priority": 10}, "priority"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"max_attempts": 101}, "max_attempts"),
    ({"payload": {"blob": "x" * 257 * KIB}}, "payload"),
    ({"payload": "not an object"}, "payload"),
    ({"misfire_policy": "often"}, "misfire_policy"),
    ({"run_at": "2030-01-01T00:00:00Z"}, "run_at"),  # a recurring job has no run_at
    ({"handler": "echo"}, "handler"),  # cannot be changed
    ({"queue": "other"}, "queue"),
    ({"owner": "bob"}, "owner"),
    ({"colour": "red"}, "colour"),
    ({"cron": None}, "cron"),
])
def test_a_bad_change_is_a_400_naming_the_field_and_the_job_is_unchanged(
        api, alice, change, field):
    job = recurring(alice)
    before = Job.objects.filter(pk=job.pk).values().get()
    schedule_before = Schedule.objects.filter(pk=job.schedule_id).values().get()

    response = api.patch(f"/api/jobs/{job.pk}/", {"name": "renamed", **change}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert Job.objects.filter(pk=job.pk).values().get() == before
    assert Schedule.objects.filter(pk=job.schedule_id).values().get() == schedule_before


@pytest.mark.parametrize("change, field", [
    ({"run_at": "2030-01-01T00:00:00"}, "run_at"),
    ({"cron": "@daily"}, "cron"),  # a one-off job has no schedule
    ({"timezone": "Europe/Paris"}, "timezone"),
])
def test_a_bad_change_to_a_one_off_job_is_a_400_and_its_run_is_untouched(
        api, alice, change, field):
    job = one_off(alice)
    runs_before = list(Run.objects.filter(job=job).values())

    response = api.patch(f"/api/jobs/{job.pk}/", change, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert list(Run.objects.filter(job=job).values()) == runs_before


def test_a_bulk_request_names_every_bad_item_by_index_and_stores_nothing(api):
    jobs = [
        CRON,
        {**CRON, "priority": 11},                            # serializer: range
        ONE_OFF,
        {"handler": "noop", "cron": "99 * * * *"},       # service layer: cron
        {**ONE_OFF, "colour": "red"},                        # unknown field
        "not an object",
        {"handler": "missing", "run_at": "2030-01-01T00:00:00"},  # two problems
    ]

    response = api.post("/api/jobs/bulk/", {"jobs": jobs}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["detail"] == "5 of 7 jobs are invalid; nothing was stored"
    errors = {e["index"]: e["errors"] for e in body["errors"]}
    assert set(errors) == {1, 3, 4, 5, 6}
    assert set(errors[1]) == {"priority"}
    assert "minute" in errors[3]["cron"][0]
    assert set(errors[4]) == {"colour"}
    assert "non_field_errors" in errors[5]
    assert set(errors[6]) == {"handler", "run_at"}
    assert stored() == (0, 0, 0, 0)


@pytest.mark.parametrize("body, reason", [
    ({"jobs": []}, "at least one"),
    ({"jobs": "all of them"}, "a list of jobs"),
    ([CRON], "a list of jobs"),
    ({"jobs": [CRON], "dry_run": True}, "unknown field"),
])
def test_a_malformed_bulk_request_is_a_400(api, body, reason):
    response = api.post("/api/jobs/bulk/", body, format="json")

    assert response.status_code == 400
    assert reason in response.json()["detail"]
    assert response.json()["errors"] == []
    assert stored() == (0, 0, 0, 0)


def test_a_bulk_request_over_the_job_cap_is_refused_whole(api):
    with override_settings(SCHEDULER={"API_BULK_MAX_JOBS": 3}):
        response = api.post("/api/jobs/bulk/", {"jobs": [CRON] * 4}, format="json")

    assert response.status_code == 400
    assert response.json()["detail"] == "at most 3 jobs per request; got 4"
    assert stored() == (0, 0, 0, 0)


def test_a_bulk_body_over_its_cap_is_a_413(api):
    with override_settings(SCHEDULER={"API_BULK_MAX_BODY_BYTES": 500}):
        response = api.post("/api/jobs/bulk/", {"jobs": [CRON] * 20}, format="json")

    assert response.status_code == 413
    assert stored() == (0, 0, 0, 0)


def test_a_malformed_idempotency_key_is_a_400_and_nothing_is_stored(api):
    response = api.post("/api/jobs/", CRON, format="json", HTTP_IDEMPOTENCY_KEY="x" * 256)

    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["detail"]
    assert stored() == (0, 0, 0, 0)
