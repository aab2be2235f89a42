"""Cross-owner powers in the REST API follow Django's model permissions, as in the admin
(scheduler_core/rest/permissions.py): is_staff alone sees and changes nothing of other owners;
view_job and view_run let a user read every owner's jobs and runs but not act on them (403);
change_job / change_run let them act; view/change_ownerpolicy gate /api/limits/ for
others; a superuser has everything."""

import pytest
from django.contrib.auth.models import User

from jobs.models import Job, OwnerPolicy
from runs.models import Run, RunState
from tests.test_api_helpers import client_for, finished_run, one_off, recurring, user_with

pytestmark = pytest.mark.django_db


@pytest.fixture
def bobs():
    bob = User.objects.create_user("bob")
    job = one_off(bob)
    return {"job": job, "run": finished_run(recurring(bob)), "pending": Run.objects.get(job=job)}


def test_staff_without_permissions_gets_nothing_of_other_owners(bobs):
    staff = client_for(User.objects.create_user("ops", is_staff=True))
    job, run = bobs["job"].pk, bobs["run"].pk

    assert staff.get("/api/jobs/").json()["count"] == 0
    assert staff.get(f"/api/jobs/{job}/").status_code == 404
    assert staff.post(f"/api/jobs/{job}/pause/").status_code == 404
    assert staff.delete(f"/api/jobs/{job}/").status_code == 404
    assert staff.get(f"/api/runs/{run}/").status_code == 404
    assert staff.post(f"/api/runs/{run}/retry/").status_code == 404
    assert staff.get("/api/dead-letter/").json()["results"] == []
    assert staff.get("/api/limits/?owner=bob").status_code == 403
    refused = staff.put("/api/limits/", {"owner": "bob", "max_running": 1}, format="json")
    assert refused.status_code == 403
    assert "jobs.change_ownerpolicy" in refused.json()["detail"]
    assert Job.objects.get(pk=job).status == Job.Status.ACTIVE
    assert Run.objects.get(pk=run).state == RunState.DEAD
    assert not OwnerPolicy.objects.exists()


def test_view_permissions_read_every_owner_but_do_not_act(bobs):
    viewer = client_for(user_with("viewer", "jobs.view_job", "runs.view_run"))
    job, run = bobs["job"].pk, bobs["run"].pk

    assert viewer.get(f"/api/jobs/{job}/").json()["owner"] == "bob"
    assert {j["id"] for j in viewer.get("/api/jobs/").json()["results"]} >= {job}
    assert viewer.get(f"/api/runs/{run}/").status_code == 200
    assert viewer.get(f"/api/runs/{run}/logs/").status_code == 200
    assert viewer.get(f"/api/jobs/{job}/runs/").json()["results"][0]["id"] == bobs["pending"].pk
    assert [r["id"] for r in viewer.get("/api/dead-letter/").json()["results"]] == [run]
    paused = viewer.post(f"/api/jobs/{job}/pause/")
    retried = viewer.post(f"/api/runs/{run}/retry/")
    patched = viewer.patch(f"/api/jobs/{job}/", {"priority": 1}, format="json")

    assert paused.status_code == retried.status_code == patched.status_code == 403
    assert "jobs.change_job" in paused.json()["detail"]
    assert "runs.change_run" in retried.json()["detail"]
    assert Job.objects.get(pk=job).status == Job.Status.ACTIVE
    assert Job.objects.get(pk=job).priority == bobs["job"].priority
    assert Run.objects.get(pk=run).state == RunState.DEAD


def test_change_permissions_act_on_every_owner(bobs):
    operator = client_for(user_with("operator", "jobs.change_job", "runs.change_run"))

    assert operator.post(f"/api/jobs/{bobs['job'].pk}/pause/").status_code == 200
    assert operator.post(f"/api/runs/{bobs['run'].pk}/retry/").status_code == 200
    assert Job.objects.get(pk=bobs["job"].pk).status == Job.Status.PAUSED
    assert Run.objects.get(pk=bobs["run"].pk).state != RunState.DEAD


def test_owner_policy_permissions_gate_other_owners_limits(bobs):
    reader = client_for(user_with("reader", "jobs.view_ownerpolicy"))
    setter = client_for(user_with("setter", "jobs.change_ownerpolicy"))

    assert reader.get("/api/limits/?owner=bob").json()["owner"] == "bob"
    assert reader.put("/api/limits/", {"owner": "bob", "max_running": 1},
                      format="json").status_code == 403
    answer = setter.put("/api/limits/", {"owner": "bob", "max_running": 2}, format="json")

    assert answer.status_code == 200 and answer.json()["max_running"] == 2
    assert OwnerPolicy.objects.get(owner__username="bob").max_running == 2


def test_an_owner_still_acts_on_their_own_jobs_without_any_permission():
    alice = User.objects.create_user("alice")
    job = one_off(alice)

    assert client_for(alice).post(f"/api/jobs/{job.pk}/pause/").status_code == 200
    assert client_for(alice).put("/api/limits/", {"max_running": 99},
                                 format="json").status_code == 403


def test_a_superuser_sees_and_acts_on_everything(bobs):
    root = client_for(User.objects.create_superuser("root"))

    assert root.get(f"/api/jobs/{bobs['job'].pk}/").status_code == 200
    assert root.post(f"/api/jobs/{bobs['job'].pk}/pause/").status_code == 200
    assert root.put("/api/limits/", {"owner": "bob", "max_running": 1},
                    format="json").status_code == 200
