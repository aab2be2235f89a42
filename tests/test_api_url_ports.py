"""An http job's URL with a port out of 1-65535 is a 400 naming payload.url at every way
in (create, bulk, PATCH, workflow nodes), not a failure at run time; nothing is stored."""

import pytest

from jobs import services
from jobs.models import Job
from runs.models import Run

pytestmark = pytest.mark.django_db


def post(api, path, body):
    return api.post(path, body, format="json")


@pytest.mark.parametrize("url", ["http://a:-1/", "http://[::1]:99999/",
                                 "http://a.com:65536/", "http://a.com:0/"])
def test_an_out_of_range_port_is_refused_naming_payload_url(api, alice, url):
    job = services.create_job("http", {"url": "http://example.com/"}, owner=alice,
                              delay_s=600)
    answers = {
        "create": post(api, "/api/jobs/", {"handler": "http", "payload": {"url": url}}),
        "bulk": post(api, "/api/jobs/bulk/", {"jobs": [{"handler": "http",
                                                        "payload": {"url": url}}]}),
        "patch": api.patch(f"/api/jobs/{job.pk}/", {"payload": {"url": url}}, format="json"),
        "workflow": post(api, "/api/workflows/", {"name": "w", "nodes": [
            {"name": "a", "handler": "http", "payload": {"url": url}}]}),
    }

    for way, answer in answers.items():
        assert answer.status_code == 400, (way, answer.content)
        text = answer.content.decode()
        assert "payload.url" in text and "65535" in text, (way, text)
    assert Job.objects.count() == 1 and Run.objects.count() == 1
    assert Job.objects.get().payload["url"] == "http://example.com/"


def test_the_highest_port_is_taken(api):
    answer = post(api, "/api/jobs/", {"handler": "http",
                                      "payload": {"url": "http://a.com:65535/"}})
    assert answer.status_code == 201, answer.content
