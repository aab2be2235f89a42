"""The Swagger UI at /api/docs/ works without internet: its page loads its
scripts, styles and icon from this server, served out of the installed
drf-spectacular-sidecar (scheduler_core/drf_settings.py), never from a public CDN."""

import re

import pytest

pytestmark = pytest.mark.django_db


def test_the_swagger_ui_loads_every_asset_from_this_server(admin_client, client):
    page = admin_client.get("/api/docs/")

    assert page.status_code == 200
    html = page.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert not [url for url in assets if "://" in url or url.startswith("//")], assets
    assert "@latest" not in html and "cdn" not in html.lower()
    scripts = [url for url in assets if url.endswith(".js")]
    assert any("swagger-ui-bundle" in url for url in scripts), assets
    for url in assets:
        if url.startswith("/static/"):
            served = client.get(url)
            assert served.status_code == 200, url
            b"".join(served.streaming_content if served.streaming else [served.content])
