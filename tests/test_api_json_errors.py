"""Every answer under /api/ is JSON, whatever fails (docs/api.md, "Errors"): bodies over
a cap (413), a path no URL matches (404), a method a view does not take (405), a body that
is not JSON (400), a failed CSRF check (403), a server error (500), a throttle (429); and
a valid 10,000-job bulk body is not refused by Django's form-size cap."""

import json

import pytest
from django.conf import settings
from django.test import Client, override_settings
from rest_framework.test import APIClient

from jobs.models import Job
from runs.api.views import QueueView

pytestmark = pytest.mark.django_db

FORM = "application/x-www-form-urlencoded"


def detail(response) -> str:
    """The JSON ``detail`` of an error answer; fails the test on any other body."""
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    return response.json()["detail"]


def bulk_body(count: int) -> str:
    return json.dumps({"jobs": [
        {"handler": "noop", "name": f"nightly export of tenant {i:05d} to the warehouse",
         "payload": {"tenant": i, "tables": ["orders", "invoices", "customers", "refunds"],
                     "bucket": f"s3://exports-eu-west-1/tenants/{i:05d}/"},
         "run_at": "2030-01-01T00:00:00Z", "priority": 5, "timeout_s": 600,
         "max_retries": 3}
        for i in range(count)]})


def test_a_ten_thousand_job_bulk_body_over_djangos_form_cap_is_accepted(api):
    body = bulk_body(10_000)
    assert len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    response = api.post("/api/jobs/bulk/", body, content_type="application/json")

    assert response.status_code == 201, response.content[:300]
    assert response.json()["count"] == 10_000
    assert Job.objects.count() == 10_000


@override_settings(SCHEDULER={"API_BULK_MAX_BODY_BYTES": 2_000_000})
def test_a_body_over_the_bulk_cap_is_a_json_413_and_stores_nothing(api):
    body = bulk_body(10_000)

    response = api.post("/api/jobs/bulk/", body, content_type="application/json")

    assert response.status_code == 413
    assert detail(response) == f"The request body is {len(body)} bytes; the cap is 2000000."
    assert not Job.objects.exists()


def test_a_body_over_an_endpoints_own_cap_is_a_json_413(api):
    body = json.dumps({"handler": "noop", "name": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE})

    response = api.post("/api/jobs/", body, content_type="application/json")

    assert response.status_code == 413
    assert "the cap is 1048576" in detail(response)


def test_a_form_body_over_djangos_cap_is_a_json_413():
    client = Client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "x" * 32
    body = "username=" + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    response = client.post("/api/auth/login/", body, content_type=FORM)

    assert response.status_code == 413
    assert "the cap is 2621440" in detail(response)


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_api_path_is_a_json_404(api, debug):
    with override_settings(DEBUG=debug):
        response = api.get("/api/no-such-thing/")
        anonymous = APIClient().post("/api/jobs/1/nope/", {}, format="json")

    assert response.status_code == 404 and anonymous.status_code == 404
    assert detail(response).startswith("Not found: no API endpoint at this path")
    assert detail(anonymous) == detail(response)


def test_a_method_a_view_does_not_take_is_a_json_405(api):
    drf = api.put("/api/jobs/", {}, format="json")
    django = Client().delete("/api/auth/login/")

    assert drf.status_code == 405 and django.status_code == 405
    assert detail(drf) == 'Method "PUT" not allowed.'
    assert detail(django) == "Method not allowed."
    assert "POST" in django["Allow"]


@pytest.mark.parametrize("debug", [False, True])
def test_a_body_that_is_not_json_is_a_json_400(api, debug):
    with override_settings(DEBUG=debug):
        broken = api.post("/api/jobs/", '{"handler": "noop",', content_type="application/json")
        form = api.post("/api/jobs/", "handler=noop", content_type=FORM)

    assert broken.status_code == 400 and detail(broken).startswith("JSON parse error")
    assert form.status_code == 415 and "Unsupported media type" in detail(form)


def test_a_failed_csrf_check_on_the_login_page_is_a_json_403():
    response = Client(enforce_csrf_checks=True).post(
        "/api/auth/login/", "username=a&password=b", content_type=FORM)

    assert response.status_code == 403
    assert detail(response) == "Forbidden."


@pytest.mark.parametrize("debug", [False, True])
def test_a_server_error_is_a_json_500_without_a_traceback(monkeypatch, alice, debug):
    def fails(self, request):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(QueueView, "get", fails)
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(alice)
    with override_settings(DEBUG=debug):
        response = client.get("/api/queues/")

    assert response.status_code == 500
    assert detail(response) == "Server error; it has been logged."
    assert b"secret internals" not in response.content


@override_settings(SCHEDULER={"API_THROTTLE_RATE": "1/minute"})
def test_a_throttled_request_is_a_json_429(api):
    from django.core.cache import cache

    cache.clear()
    api.get("/api/jobs/")
    response = api.get("/api/jobs/")
    cache.clear()

    assert response.status_code == 429
    assert "throttled" in detail(response).lower()
    assert int(response["Retry-After"]) > 0


def test_pages_outside_the_api_keep_their_html(alice):
    response = Client().get("/admin/no-such-page/")

    assert response.status_code in (302, 404)
    assert not response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("path", ["/api/docs/", "/api/schema/"])
def test_the_schema_and_its_docs_page_answer_a_missing_login_as_json(path):
    """Without a login both answer JSON (the docs page's detail saying where to log in),
    not drf-spectacular's text/html 401 or a YAML error body."""
    response = Client().get(path)

    assert response.status_code in (401, 403)
    text = detail(response)
    if path == "/api/docs/":
        assert "log in at /admin/" in text
