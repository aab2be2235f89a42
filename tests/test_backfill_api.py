"""Backfill through the REST API (POST /api/jobs/{id}/backfill/ and
/api/workflows/{id}/backfill/) and the admin's actions and progress pages (docs/api.md,
"Backfill"; docs/admin.md, "Backfill").

The API and the admin use the default database; they run here on every broker over it
(redis, a Redis Cluster, the database broker on PostgreSQL). The SQLite pair runs this
module in tests/test_embedded_default.py, where the default database is SQLite."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from jobs import services
from jobs.models import Backfill
from jobs.tenants import set_owner_policy
from runs.clock import db_now
from runs.models import Run, RunState
from tests.test_admin import act, text
from tests.test_api_helpers import client_for, user_with
from workflows import services as workflows
from workflows.models import WorkflowBackfill, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pair(broker):
    """The broker of a pair whose database is the default one (the one the API uses)."""
    if broker.using != "default":
        pytest.skip("the API and admin use the default database: SQLite's run is "
                    "tests/test_embedded_default.py")
    return broker


@pytest.fixture
def start():
    return (db_now("default") - timedelta(days=1)).replace(minute=0, second=0,
                                                           microsecond=0)


def hours(start, count: int) -> dict:
    return {"start": start.isoformat(), "end": (start + timedelta(hours=count)).isoformat()}


def leased_all(broker) -> set[int]:
    """The ids of every run the broker hands out now (a lease may take a few at a time)."""
    found: set[int] = set()
    for _ in range(10):
        broker.promote()
        found |= {lease.run_id for lease in broker.lease(["default"], 10, "w-api")}
    return found


def hourly(owner, **options):
    return services.create_job("noop", {}, cron="0 * * * *", owner=owner, **options)


def test_a_job_backfill_answers_what_it_made_and_a_repeat_makes_nothing(pair, api, alice,
                                                                        start):
    set_owner_policy(alice, max_running=10)  # the default, 2, would park the third
    job = hourly(alice)

    first = api.post(f"/api/jobs/{job.pk}/backfill/", hours(start, 3), format="json")
    again = api.post(f"/api/jobs/{job.pk}/backfill/", hours(start, 3), format="json")

    assert first.status_code == 200, first.content
    assert {k: first.json()[k] for k in ("occurrences", "made", "skipped")} == {
        "occurrences": 3, "made": 3, "skipped": 0}
    assert (again.json()["made"], again.json()["skipped"]) == (0, 3)
    runs = Run.objects.filter(job=job)
    assert runs.count() == 3
    assert set(runs.values_list("backfill_id", flat=True)) == {first.json()["backfill"]}
    shown = api.get(f"/api/runs/{runs.first().pk}/").json()
    assert shown["backfill_id"] == first.json()["backfill"]
    assert leased_all(pair) == set(runs.values_list("pk", flat=True))


def test_a_workflow_backfill_starts_workflow_runs(pair, api, alice, start):
    flow = workflows.create_workflow("hourly", [{"name": "a", "handler": "noop"}], [],
                                     schedule="0 * * * *", owner=alice)

    answer = api.post(f"/api/workflows/{flow.pk}/backfill/", hours(start, 2), format="json")

    assert answer.status_code == 200, answer.content
    assert answer.json()["made"] == 2
    assert set(WorkflowRun.objects.filter(workflow=flow).values_list(
        "started_by", flat=True)) == {"backfill"}


def test_a_range_over_the_limit_is_a_400_naming_the_limit(pair, api, alice, start, settings):
    settings.SCHEDULER = {"BACKFILL_MAX_OCCURRENCES": 2}
    job = hourly(alice)

    answer = api.post(f"/api/jobs/{job.pk}/backfill/", hours(start, 3), format="json")

    assert answer.status_code == 400
    assert "BACKFILL_MAX_OCCURRENCES" in answer.json()["end"][0]
    assert not Run.objects.filter(job=job).exists()


@pytest.mark.parametrize("body, field", [
    ({"end": "2026-01-02"}, "start"),
    ({"start": "2026-01-01"}, "end"),
    ({"start": "not a time", "end": "2026-01-02"}, "start"),
    ({"start": "2026-01-02", "end": "2026-01-01"}, "end"),
    ({"start": "2026-01-01", "end": "2026-01-02", "catch_up": "all"}, "catch_up"),
])
def test_bad_input_is_a_400_naming_the_field(pair, api, alice, body, field):
    job = hourly(alice)

    answer = api.post(f"/api/jobs/{job.pk}/backfill/", body, format="json")

    assert answer.status_code == 400, answer.content
    assert field in answer.json()
    assert not Run.objects.filter(job=job).exists()


def test_a_one_off_job_is_a_409_and_a_quota_a_403(pair, api, alice, start):
    one_off = services.create_job("noop", {}, owner=alice, delay_s=60)
    set_owner_policy(alice, max_pending=2)
    job = hourly(alice)

    refused = api.post(f"/api/jobs/{one_off.pk}/backfill/", hours(start, 1), format="json")
    over = api.post(f"/api/jobs/{job.pk}/backfill/", hours(start, 3), format="json")

    assert refused.status_code == 409 and "one-off" in refused.json()["detail"]
    assert over.status_code == 403 and over.json()["limit"] == "max_pending"
    assert not Run.objects.filter(job=job).exists()


def test_another_owners_job_or_workflow_is_a_404_and_view_only_a_403(pair, api, start):
    bob = User.objects.create_user("bob")
    job = hourly(bob)
    flow = workflows.create_workflow("bobs", [{"name": "a", "handler": "noop"}], [],
                                     schedule="0 * * * *", owner=bob)
    viewer = client_for(user_with("viewer", "jobs.view_job"))
    operator = client_for(user_with("operator", "jobs.change_job"))

    assert api.post(f"/api/jobs/{job.pk}/backfill/", hours(start, 1),
                    format="json").status_code == 404
    assert api.post(f"/api/workflows/{flow.pk}/backfill/", hours(start, 1),
                    format="json").status_code == 404
    forbidden = viewer.post(f"/api/jobs/{job.pk}/backfill/", hours(start, 1), format="json")
    assert forbidden.status_code == 403 and "jobs.change_job" in forbidden.json()["detail"]
    assert not Run.objects.filter(job=job).exists()
    assert operator.post(f"/api/jobs/{job.pk}/backfill/", hours(start, 1),
                         format="json").json()["made"] == 1


def test_the_admin_action_asks_for_the_range_then_shows_progress(pair, admin_client, start):
    job = hourly(None, name="hourly-report")

    form = text(act(admin_client, "/admin/jobs/job/", "backfill_jobs", [job.pk]))
    done = text(act(admin_client, "/admin/jobs/job/", "backfill_jobs", [job.pk],
                    backfill_apply="yes", **hours(start, 3)))
    Run.objects.filter(job=job, scheduled_at=start).update(state=RunState.SUCCEEDED)
    listing = text(admin_client.get("/admin/jobs/backfill/"))

    assert 'name="start"' in form and "hourly-report" in form
    assert f"Job {job.pk}: 3 occurrences, 3 runs made, 0 skipped" in done
    assert Run.objects.filter(job=job, backfill_id__isnull=False).count() == 3
    record = Backfill.objects.get(job=job)
    assert record.requested_by is not None
    assert "3 of 3 (done)" in listing and "hourly-report" in listing
    assert '<td class="field-finished">1</td>' in listing


def test_the_admin_action_names_a_bad_field_and_makes_nothing(pair, admin_client, start,
                                                             settings):
    settings.SCHEDULER = {"BACKFILL_MAX_OCCURRENCES": 2}
    job = hourly(None)

    page = text(act(admin_client, "/admin/jobs/job/", "backfill_jobs", [job.pk],
                    backfill_apply="yes", **hours(start, 3)))

    assert "BACKFILL_MAX_OCCURRENCES" in page and 'name="end"' in page
    assert not Run.objects.filter(job=job).exists()


def test_the_workflow_admin_action_backfills_and_lists_progress(pair, admin_client, start):
    flow = workflows.create_workflow("nightly", [{"name": "a", "handler": "noop"}], [],
                                     schedule="0 * * * *")

    done = text(act(admin_client, "/admin/workflows/workflow/", "backfill_workflows",
                    [flow.pk], backfill_apply="yes", **hours(start, 2)))
    listing = text(admin_client.get("/admin/workflows/workflowbackfill/"))

    assert f"Workflow {flow.pk}: 2 occurrences, 2 runs made" in done
    assert WorkflowBackfill.objects.get(workflow=flow).made == 2
    assert "2 of 2 (done)" in listing
