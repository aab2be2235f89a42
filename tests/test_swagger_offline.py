"""The Swagger UI at /api/docs/ works without internet: its page loads its
scripts, styles and icon from this server, served out of the installed
drf-spectacular-sidecar (scheduler_core/drf_settings.py), never from a public CDN; and the
schema it shows marks the old job field names deprecated (jobs/api/old_names.py)."""

import re

import pytest

pytestmark = pytest.mark.django_db


def test_the_swagger_ui_loads_every_asset_from_this_server(admin_client, client):
    page = admin_client.get("/api/docs/")

    assert page.status_code == 200
    html = page.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert not [url for url in assets if "://" in url or url.startswith("//")], assets
    # drf-spectacular's default: https://cdn.jsdelivr.net/npm/swagger-ui-dist@latest. Not
    # "cdn" anywhere: the page's random CSRF token held those letters in one CI run.
    assert "@latest" not in html and "jsdelivr" not in html.lower()
    scripts = [url for url in assets if url.endswith(".js")]
    assert any("swagger-ui-bundle" in url for url in scripts), assets
    for url in assets:
        if url.startswith("/static/"):
            served = client.get(url)
            assert served.status_code == 200, url
            b"".join(served.streaming_content if served.streaming else [served.content])


def test_the_old_job_field_names_are_deprecated_in_the_schema(admin_client):
    schema = admin_client.get("/api/schema/?format=json").json()["components"]["schemas"]

    jobs = {name: component["properties"] for name, component in schema.items()
            if "cron" in component.get("properties", {})
            and "schedule" in component.get("properties", {})}
    assert jobs, "no job schema shows both cron and its old name schedule"
    for name, properties in jobs.items():
        assert properties["schedule"].get("deprecated") is True, name
        assert properties["cron"].get("deprecated") is not True, name
        if "max_retries" in properties:
            assert properties["max_retries"].get("deprecated") is True, name
    workflow = schema["WorkflowCreateRequest"]["properties"]["schedule"]
    assert workflow.get("deprecated") is not True  # a workflow's own field
