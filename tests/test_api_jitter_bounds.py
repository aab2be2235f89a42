"""A cron jitter as long as the schedule's shortest gap is refused at every way in
(docs/cron.md, "Jitter"): it let one job's runs pile up past max_pending."""

import pytest

from jobs import services
from jobs.models import Job, Schedule
from workflows.models import Workflow

pytestmark = pytest.mark.django_db

MINUTELY = {"handler": "noop", "cron": "* * * * *"}


def post(api, path, body):
    return api.post(path, body, format="json")


def test_a_jitter_not_shorter_than_the_schedules_gap_is_refused_at_every_way_in(api, alice):
    every_five = services.create_job("noop", cron="*/5 * * * *", owner=alice, jitter_s=120)
    answers = {
        "create": post(api, "/api/jobs/", {**MINUTELY, "jitter_s": 86_400}),
        "at the gap": post(api, "/api/jobs/", {**MINUTELY, "jitter_s": 60}),
        "bulk": post(api, "/api/jobs/bulk/", {"jobs": [{**MINUTELY, "jitter_s": 30},
                                                       {**MINUTELY, "jitter_s": 600}]}),
        "patch jitter": api.patch(f"/api/jobs/{every_five.pk}/", {"jitter_s": 300},
                                  format="json"),
        "patch cron": api.patch(f"/api/jobs/{every_five.pk}/", {"cron": "* * * * *"},
                                format="json"),
    }
    workflow = post(api, "/api/workflows/", {
        "name": "w", "nodes": [{"name": "a", "handler": "noop"}],
        "schedule": {"cron": "* * * * *", "jitter_s": 3600}})
    with pytest.raises(services.InvalidJob) as python:
        services.create_job("noop", cron="@hourly", jitter_s=3600)

    gaps = {"create": "60 s", "at the gap": "60 s", "bulk": "60 s", "patch jitter": "300 s",
            "patch cron": "60 s"}
    for way, answer in answers.items():
        assert answer.status_code == 400, (way, answer.content)
        text = answer.content.decode()
        assert "jitter_s" in text and "shortest gap" in text and gaps[way] in text, (way, text)
    assert answers["bulk"].json()["errors"][0]["index"] == 1
    assert workflow.status_code == 400 and "schedule.jitter_s" in workflow.json(), \
        workflow.content
    assert "3600 s" in python.value.errors["jitter_s"]
    assert Job.objects.count() == 1 and not Workflow.objects.exists()
    assert Schedule.objects.get().cron == "*/5 * * * *"
    assert Schedule.objects.get().jitter_s == 120


def test_a_jitter_under_the_gap_is_taken(api):
    answer = post(api, "/api/jobs/", {**MINUTELY, "jitter_s": 59})
    assert answer.status_code == 201, answer.content
