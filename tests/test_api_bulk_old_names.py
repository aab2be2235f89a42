"""A bulk create names each item's bad fields as that item sent them: one item's old
name (max_retries) must not rename another item's max_attempts (docs/api.md, "Job
fields")."""

import pytest

from jobs.models import Job

pytestmark = pytest.mark.django_db


def post(api, path, body):
    return api.post(path, body, format="json")


def test_each_bulk_item_names_its_fields_as_it_sent_them(api):
    http = {"handler": "http", "payload": {"url": "http://example.com/"}}
    answer = post(api, "/api/jobs/bulk/", {"jobs": [{**http, "max_attempts": 50},
                                                    {**http, "max_retries": 70}]})

    assert answer.status_code == 400, answer.content
    named = {e["index"]: set(e["errors"]) for e in answer.json()["errors"]}
    assert named == {0: {"max_attempts"}, 1: {"max_retries"}}
    assert not Job.objects.exists()
