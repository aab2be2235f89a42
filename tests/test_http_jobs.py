"""Creating http jobs: the payload is checked at creation (a 400 naming the field, nothing
stored) and its secret headers are stored encrypted (docs/http-handler.md)."""

import io
import json

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from jobs import services
from jobs.models import Job
from runs.models import Run
from runs.outbound import secrets
from runs.outbound.payload import http_payload, opened
from scheduler_core.exceptions import InvalidJob
from tests.sealed import secret_of
from tests.test_tenant_bounds import production_handlers

pytestmark = pytest.mark.django_db
RUN_AT = "2030-01-01T09:00:00Z"
URL = "https://hooks.example.com/x"

BAD = [
    ({"url": "ftp://example.com/"}, "payload.url", "only http and https"),
    ({"url": "file:///etc/passwd"}, "payload.url", "only http and https"),
    ({"url": "gopher://127.0.0.1:6379/_FLUSHALL"}, "payload.url", "only http and https"),
    ({"url": "http://user:pw@example.com/"}, "payload.url", "credentials"),
    ({"url": "https:///nohost"}, "payload.url", "host"),
    ({}, "payload.url", "URL"),
    ({"url": URL, "method": "TRACE"}, "payload.method", "one of"),
    ({"url": URL, "headers": {"X-A": "1\r\nX-Injected: 1"}}, "payload.headers.X-A", "CR, LF"),
    ({"url": URL, "headers": {"X-A": " padded"}}, "payload.headers.X-A", "start or end"),
    ({"url": URL, "headers": {"Authorization": "Bearer x\t"}}, "payload.headers.Authorization",
     "start or end"),
    ({"url": URL, "headers": {"X-A": "caf\u00e9"}}, "payload.headers.X-A", "ASCII"),
    ({"url": URL, "headers": {"Bad Name": "1"}}, "payload.headers", "header name"),
    ({"url": URL, "headers": {"Host": "internal"}}, "payload.headers", "set by the client"),
    ({"url": URL, "headers": ["X-A"]}, "payload.headers", "object"),
    ({"url": URL, "timeout_s": 61}, "payload.timeout_s", "at most 60"),
    ({"url": URL, "timeout_s": 0}, "payload.timeout_s", "above 0"),
    ({"url": URL, "json": {}, "body": "x"}, "payload.body", "not both"),
    ({"url": URL, "body": {"a": 1}}, "payload.body", "text"),
    ({"url": URL, "success_statuses": [200, 700]}, "payload.success_statuses", "100-599"),
    ({"url": URL, "response_headers": ["Set-Cookie"]}, "payload.response_headers", "never"),
    ({"url": URL, "encrypted_headers": {"Authorization": "forged"}},
     "payload.encrypted_headers.Authorization", "payload.headers"),
    ({"url": URL, "encrypted_headers": {"Authorization": "(encrypted)"}},
     "payload.encrypted_headers.Authorization", "no stored secret"),
    ({"url": URL, "seal": "abc"}, "payload", "unknown keys"),
    ({"url": URL, "encrypted_headers": {"X\r\nY": "(encrypted)"}}, "payload.encrypted_headers",
     "not a valid header name"),
    ({"url": URL, "colour": "red"}, "payload", "unknown keys"),
]


@pytest.mark.parametrize("payload, field, reason", BAD, ids=[f"{f}-{i}" for i, (_, f, _) in
                                                             enumerate(BAD)])
def test_a_bad_http_payload_is_a_400_naming_the_field(api, payload, field, reason):
    response = api.post("/api/jobs/", {"handler": "http", "run_at": RUN_AT,
                                       "payload": payload}, format="json")

    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert reason.lower() in " ".join(errors[field]).lower(), errors
    assert Job.objects.count() == Run.objects.count() == 0


def test_the_payload_timeout_must_fit_in_the_jobs_timeout(api):
    response = api.post("/api/jobs/", {"handler": "http", "run_at": RUN_AT, "timeout_s": 5,
                                       "payload": {"url": URL, "timeout_s": 10}}, format="json")

    assert response.status_code == 400
    assert "at most 5" in " ".join(response.json()["payload.timeout_s"])


@override_settings(SCHEDULER={"HTTP_MAX_TIMEOUT_S": 120})
def test_the_handlers_timeout_cap_is_a_tunable(api):
    response = api.post("/api/jobs/", {"handler": "http", "run_at": RUN_AT,
                                       "payload": {"url": URL, "timeout_s": 90}}, format="json")
    assert response.status_code == 201, response.content


def test_the_python_api_validates_too():
    with pytest.raises(InvalidJob) as bad:
        services.create_job("http", {"url": "ftp://x/"}, delay_s=60)
    assert "payload.url" in bad.value.errors
    with pytest.raises(InvalidJob) as helper:
        http_payload("http://x/", method="BREW")
    assert set(helper.value.errors) == {"payload.method"}


def test_secret_headers_are_stored_encrypted(api):
    response = api.post("/api/jobs/", {"handler": "http", "run_at": RUN_AT, "payload": {
        "url": URL, "method": "POST", "json": {"a": 1},
        "headers": {"Authorization": "Bearer s3cret-1", "X-Sig": "s3cret-2",
                    "Cookie": "id=s3cret-3", "X-Api-Key": "s3cret-4", "X-Plain": "plain"},
        "secret_headers": ["X-Sig"]}}, format="json")
    assert response.status_code == 201, response.content

    job = Job.objects.get()
    assert job.payload["headers"] == {"X-Plain": "plain"}
    assert set(job.payload["encrypted_headers"]) == {"Authorization", "X-Sig", "Cookie",
                                                    "X-Api-Key"}
    assert secret_of(job, "X-Sig") == "s3cret-2"
    with connection.cursor() as cursor:  # what the database holds, not what Django shows
        cursor.execute("SELECT payload::text FROM jobs_job WHERE id = %s", [job.pk])
        raw = cursor.fetchone()[0]
    assert "s3cret" not in raw


def test_a_stored_payload_validates_again_unchanged():
    payload = http_payload(URL, headers={"Authorization": "Bearer x"}, json=[1])
    job = services.create_job("http", payload, delay_s=60)
    stored = Job.objects.get(pk=job.pk).payload

    services.update_job(job.pk, {"name": "renamed"})
    services.update_job(job.pk, {"priority": 3})
    assert Job.objects.get(pk=job.pk).payload == stored
    assert secret_of(job, "Authorization") == "Bearer x"


def test_the_http_handler_is_registered_in_production():
    assert "http" in production_handlers()


def test_a_secret_sealed_with_another_key_opens_only_while_that_key_is_a_fallback():
    job = services.create_job("http", http_payload(URL, headers={"Authorization": "Bearer x"}),
                              delay_s=60)
    stored = Job.objects.get(pk=job.pk).payload
    old_key, new_key = settings.SECRET_KEY, "a-new-key-0123456789-abcdefghijklmnopqrstuvwxyz"
    with override_settings(SECRET_KEY=new_key):
        with pytest.raises(InvalidJob) as bad:  # an edit cannot keep it
            services.update_job(job.pk, {"name": "renamed"})
        assert "SECRET_KEY" in bad.value.errors["payload.encrypted_headers.Authorization"]
        with pytest.raises(secrets.Undecryptable):
            opened(stored, job.owner_id)
    with override_settings(SECRET_KEY=new_key, SECRET_KEY_FALLBACKS=[old_key]):
        assert opened(stored, job.owner_id) == {"Authorization": "Bearer x"}
        rotated = {**stored, "encrypted_headers": {
            "Authorization": secrets.rotate(stored["encrypted_headers"]["Authorization"])}}
    with override_settings(SECRET_KEY=new_key):  # the old key gone from the fallbacks
        assert opened(rotated, job.owner_id) == {"Authorization": "Bearer x"}


def test_rotatehttpsecrets_reencrypts_under_the_new_key():
    job = services.create_job("http", http_payload(URL, headers={"X-Api-Key": "k"}),
                              delay_s=60)
    old_key, new_key = settings.SECRET_KEY, "a-new-key-0123456789-abcdefghijklmnopqrstuvwxyz"
    with override_settings(SECRET_KEY=new_key, SECRET_KEY_FALLBACKS=[old_key]):
        out = io.StringIO()
        call_command("rotatehttpsecrets", stdout=out)
    assert "re-encrypted the secret headers of 1 http jobs" in out.getvalue()
    with override_settings(SECRET_KEY=new_key):
        assert secret_of(job, "X-Api-Key") == "k"


def test_a_payload_edited_in_the_admin_is_stored_with_its_secrets_encrypted(admin_client):
    job = services.create_job("http", {"url": URL}, delay_s=600)
    edited = {"url": URL, "headers": {"Authorization": "Bearer adm1n-s3cret"}}
    admin_client.post(f"/admin/jobs/job/{job.pk}/change/", {
        "name": "hook", "payload": json.dumps(edited), "priority": "5", "timeout_s": "60",
        "max_attempts": "4", "_save": "Save"})

    stored = Job.objects.get(pk=job.pk).payload
    assert stored["headers"] == {} and "adm1n" not in json.dumps(stored)
    assert secret_of(job, "Authorization") == "Bearer adm1n-s3cret"


@pytest.mark.parametrize("url, reason", [("ftp://hooks.example.com/", "only http and https"),
                                         ("https://u:p@hooks.example.com/", "credentials")])
def test_an_alert_webhook_url_keeps_the_http_handlers_url_rule(api, url, reason):
    response = api.put("/api/alerts/", {"webhook_url": url}, format="json")

    assert response.status_code == 400, response.content
    assert reason in " ".join(response.json()["webhook_url"])
    assert api.put("/api/alerts/", {"webhook_url": URL}, format="json").status_code == 200


@override_settings(SCHEDULER={"OWNER_MAX_TIMEOUT_S": 20})
def test_the_payload_timeout_keeps_within_the_owners_longest_timeout(api):
    body = {"handler": "http", "run_at": RUN_AT, "payload": {"url": URL, "timeout_s": 30}}
    response = api.post("/api/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    # The job names no timeout_s: it gets the owner's longest (20 s), which the payload's
    # own must fit in.
    assert "at most 20" in " ".join(response.json()["payload.timeout_s"])



BAD_IDNA = "http://xn--a-.example/"  # an A-label ending in a hyphen: httpx parses it lazily


def test_a_host_that_is_no_valid_idna_label_is_a_400_on_every_path(api, alice, admin_client):
    """Reading such a URL's host raised idna's error outside the URL check: a 500 on each
    path below, and the admin's add form."""
    job = services.create_job("http", {"url": URL}, owner=alice, delay_s=600)
    bad = {"url": BAD_IDNA}
    answers = {
        "create": api.post("/api/jobs/", {"handler": "http", "run_at": RUN_AT,
                                          "payload": bad}, format="json"),
        "bulk": api.post("/api/jobs/bulk/", {"jobs": [
            {"handler": "http", "run_at": RUN_AT, "payload": bad}]}, format="json"),
        "workflow": api.post("/api/workflows/", {"name": "w", "nodes": [
            {"name": "a", "handler": "http", "payload": bad}]}, format="json"),
        "patch": api.patch(f"/api/jobs/{job.pk}/", {"payload": bad}, format="json"),
        "alerts": api.put("/api/alerts/", {"webhook_url": BAD_IDNA}, format="json"),
    }

    for path, response in answers.items():
        assert response.status_code == 400, (path, response.content)
        assert "url" in response.content.decode() and "valid URL" in response.content.decode()
    assert Job.objects.get(pk=job.pk).payload["url"] == URL
    assert Job.objects.count() == 1
    page = admin_client.post("/admin/jobs/job/add/", {
        "name": "idna", "handler": "http", "payload": json.dumps(bad), "queue": "default",
        "misfire_policy": "run_once", "priority": "5", "timeout_s": "60",
        "max_attempts": "4"})
    assert page.status_code == 200 and "payload.url" in page.content.decode()
    assert not Job.objects.filter(name="idna").exists()


def test_a_redirect_to_a_host_that_is_no_valid_idna_label_is_refused_for_good():
    from runs.outbound.client import target
    from scheduler_core.exceptions import PermanentFailure

    with pytest.raises(PermanentFailure, match="not a valid URL"):
        target(BAD_IDNA)
