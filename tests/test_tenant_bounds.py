"""Safe by default (docs/isolation.md, "Tenant bounds"; docs/security.md): the fault-test
handlers exist only where the fault-injection app is installed, the demo handlers only
when turned on, and an ordinary owner cannot take every worker nor fill the database: a
per-owner concurrency default, the highest priority, longest timeout and most attempts it
may ask for, the queues it was given, and quotas on jobs and pending runs, each refusal
naming the limit and its value."""

import os
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import services
from jobs.models import Job
from jobs.tenants import QuotaExceeded, set_owner_policy
from runs.execution.transitions import run_refs
from runs.models import PENDING_STATES, Run, RunState
from scheduler_core.exceptions import InvalidJob
from tests.conftest import ROOT
from tests.test_api_helpers import client_for, one_off

pytestmark = pytest.mark.django_db

LATER = "2030-01-01T00:00:00Z"
FAULT_HANDLERS = {"busy_loop", "suicide", "chaos.work"}
DEMO_HANDLERS = {"noop", "echo", "sleep", "flaky", "always_fails"}


def production_handlers(**env) -> set[str]:
    """The handler names a process with the production settings registers."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("SCHEDULER_") and k != "DJANGO_SETTINGS_MODULE"}
    environ.update(DJANGO_SETTINGS_MODULE="scheduler_project.settings",
                   SECRET_KEY="a-test-key-that-is-not-the-dev-default-0123456789", **env)
    script = ("import django; django.setup(); from django.conf import settings; "
              "from jobs.registry import handler_names; "
              "assert 'chaos' not in settings.INSTALLED_APPS, settings.INSTALLED_APPS; "
              "print(' '.join(handler_names()))")
    done = subprocess.run([sys.executable, "-c", script], env=environ, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_production_settings_register_no_fault_handlers_and_demo_ones_only_when_asked():
    assert production_handlers() & (FAULT_HANDLERS | DEMO_HANDLERS) == set()
    with_demo = production_handlers(SCHEDULER_DEMO_HANDLERS="true")
    assert with_demo >= DEMO_HANDLERS
    assert with_demo & FAULT_HANDLERS == set()


def test_the_fault_injection_app_is_not_packaged():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [pattern for pattern in include if pattern.startswith("chaos")]


def test_the_admin_add_form_preselects_no_handler(client):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get("/admin/jobs/job/add/").content.decode()
    select = page[page.index('name="handler"'):]
    select = select[:select.index("</select>")]
    first_option = select[select.index("<option"):].split(">", 1)[0]
    assert 'value=""' in first_option
    assert "selected" not in select.replace('value="" selected', "")


def test_an_ordinary_owners_runs_get_the_default_concurrency_limit(rb, api, alice):
    for _ in range(5):
        assert api.post("/api/jobs/", {"handler": "noop", "run_at": "2020-01-01T00:00:00Z"},
                        format="json").status_code == 201
    rb.push(run_refs(Run.objects.all()))
    rb.promote()
    leased = rb.lease(["default"], 10, "w1")
    assert len(leased) == 2  # SCHEDULER_OWNER_CONCURRENCY's default
    assert api.get("/api/limits/").json()["effective"]["max_running"] == 2


@pytest.mark.parametrize("field, value, reason", [
    ("priority", 0, "highest priority allowed (highest_priority) is 3"),
    ("timeout_s", 3601, "longest timeout (max_timeout_s) is 3600 s"),
    ("max_retries", 10, "max_attempts is 10"),
])
def test_asking_beyond_an_owners_bounds_is_a_400_naming_the_limit(api, alice, field, value,
                                                                   reason):
    response = api.post("/api/jobs/", {"handler": "noop", "run_at": LATER, field: value},
                        format="json")
    assert response.status_code == 400
    assert reason in response.json()[field][0]
    assert not Job.objects.exists()


def test_a_job_or_node_that_names_no_timeout_attempts_or_priority_gets_the_default_within_bounds(
        api, alice):
    """A workflow node without them got 300 s, 4 attempts and priority 5 whatever the
    owner's bounds (the defaults were filled in after the bounds check), while a plain job
    without them was refused naming a field its client never sent. Both now get the
    default, kept within the owner's bounds: min(300, 60), min(4, 3), max(5, 7)."""
    set_owner_policy(alice, max_timeout_s=60, max_attempts=3, highest_priority=7)
    within = {"timeout_s": 60, "max_attempts": 3, "priority": 7}

    made = api.post("/api/jobs/", {"handler": "noop", "run_at": LATER}, format="json")
    bulk = api.post("/api/jobs/bulk/", {"jobs": [{"handler": "noop", "run_at": LATER},
                                                 {"handler": "noop"}]}, format="json")
    flow = api.post("/api/workflows/", {"name": "w", "nodes": [{"name": "a", "handler": "noop"},
                                                               {"name": "b", "handler": "noop"}],
                                        "edges": [["a", "b"]]}, format="json")
    python = services.create_job("noop", {}, owner=alice, delay_s=600)

    for response in (made, bulk, flow):
        assert response.status_code == 201, response.content
    assert Job.objects.count() == 6
    for job in Job.objects.all():
        assert {field: getattr(job, field) for field in within} == within, job.name
    assert {run.max_attempts for run in Run.objects.all()} == {3}
    assert python.timeout_s == 60
    refused = api.post("/api/jobs/", {"handler": "noop", "timeout_s": 61}, format="json")
    node = api.post("/api/workflows/", {"name": "x", "nodes": [
        {"name": "a", "handler": "noop", "max_attempts": 4}]}, format="json")
    assert refused.status_code == node.status_code == 400
    assert "nodes[0].max_attempts" in node.json(), node.json()


def test_staff_raise_an_owners_bounds_through_its_policy(api, alice):
    staff = client_for(User.objects.create_user("ops", is_staff=True, is_superuser=True))
    response = staff.put("/api/limits/", {"owner": "alice", "highest_priority": 0,
                                          "max_timeout_s": 7200, "max_attempts": 20},
                         format="json")
    assert response.status_code == 200, response.content
    created = api.post("/api/jobs/", {"handler": "noop", "run_at": LATER, "priority": 0,
                                      "timeout_s": 7200, "max_retries": 19}, format="json")
    assert created.status_code == 201, created.content
    refused = api.patch(f"/api/jobs/{created.json()['id']}/", {"timeout_s": 7201},
                        format="json")
    assert refused.status_code == 400
    assert "(max_timeout_s) is 7200 s" in refused.json()["timeout_s"][0]


def test_another_owners_queue_is_a_400_naming_queue_and_hidden_from_the_queue_list(rb, api):
    bob = User.objects.create_user("bob")
    set_owner_policy(bob, queues=["bob-queue"])
    one_off(bob, queue="bob-queue", delay_s=None,
            run_at=datetime.now(UTC) - timedelta(seconds=5))
    rb.push(run_refs(Run.objects.all()))

    response = api.post("/api/jobs/", {"handler": "noop", "run_at": LATER,
                                       "queue": "bob-queue"}, format="json")
    bulk = api.post("/api/jobs/bulk/", {"jobs": [{"handler": "noop", "run_at": LATER,
                                                  "queue": "bob-queue"}]}, format="json")

    assert response.status_code == 400
    assert "'bob-queue' is not one of this owner's queues" in response.json()["queue"][0]
    assert bulk.status_code == 400 and "queue" in bulk.json()["errors"][0]["errors"]
    assert Job.objects.filter(queue="bob-queue").count() == 1
    assert "bob-queue" not in {q["queue"] for q in api.get("/api/queues/").json()}
    assert "bob-queue" in {q["queue"] for q in client_for(bob).get("/api/queues/").json()}


def test_the_jobs_quota_refuses_a_request_that_would_exceed_it_and_stores_nothing(api, alice):
    set_owner_policy(alice, max_jobs=3)
    four = {"jobs": [{"handler": "noop", "run_at": LATER}] * 4}
    three = {"jobs": [{"handler": "noop", "run_at": LATER}] * 3}

    refused = api.post("/api/jobs/bulk/", four, format="json")
    assert refused.status_code == 403
    assert refused.json()["limit"] == "max_jobs" and refused.json()["value"] == 3
    assert "at most 3 jobs" in refused.json()["detail"]
    assert not Job.objects.exists()

    assert api.post("/api/jobs/bulk/", three, format="json").status_code == 201
    one_more = api.post("/api/jobs/", {"handler": "noop", "run_at": LATER}, format="json")
    assert one_more.status_code == 403 and one_more.json()["limit"] == "max_jobs"
    # Cancelling a job frees its place.
    api.delete(f"/api/jobs/{Job.objects.first().pk}/")
    assert api.post("/api/jobs/", {"handler": "noop", "run_at": LATER},
                    format="json").status_code == 201


def test_the_pending_runs_quota_bounds_triggers_too(api, alice):
    set_owner_policy(alice, max_pending=2)
    job = api.post("/api/jobs/", {"handler": "echo", "schedule": "@daily"}, format="json")
    assert api.post(f"/api/jobs/{job.json()['id']}/trigger/").status_code == 201
    assert api.post(f"/api/jobs/{job.json()['id']}/trigger/").status_code == 201
    third = api.post(f"/api/jobs/{job.json()['id']}/trigger/")
    assert third.status_code == 403
    assert (third.json()["limit"], third.json()["value"]) == ("max_pending", 2)
    assert Run.objects.count() == 2


def test_the_python_api_applies_the_owners_bounds_and_none_without_an_owner(alice):
    with pytest.raises(InvalidJob) as refused:
        services.create_job("noop", owner=alice, delay_s=60, priority=0)
    assert "highest_priority" in refused.value.errors["priority"]
    set_owner_policy(alice, max_jobs=1)
    services.create_job("noop", owner=alice, delay_s=60)
    with pytest.raises(QuotaExceeded):
        services.create_job("noop", owner=alice, delay_s=60)
    ownerless = services.create_job("noop", delay_s=60, priority=0, queue="anything",
                                    timeout_s=86_400)
    assert ownerless.priority == 0


def test_bounds_cost_the_same_queries_for_ten_jobs_as_for_a_thousand(alice, monkeypatch):
    from runs.flow import control as flow

    # Whether flow control is in use is read at most once per CACHE_S per process, not
    # per call: a loaded machine's thousand-job call can outlast a second and read it
    # again. Those two reads are not the bounds' cost, so the cache outlasts the test.
    monkeypatch.setattr(flow, "CACHE_S", 3600.0)
    counts = []
    for n in (10, 1000):
        flow.in_use("default")
        specs = [{"handler": "noop", "run_at": datetime(2030, 1, 1, tzinfo=UTC),
                  "payload": {"i": i}} for i in range(n)]
        with CaptureQueriesContext(connection) as queries:
            services.create_jobs(specs, owner=alice)
        # A call of 100+ runs also sends one DISCARD PLANS (jobs/ingest/copy.py,
        # replan_checks): a constant, not the bounds' cost.
        counts.append(len([q for q in queries if q["sql"] != "DISCARD PLANS"]))
    assert counts[0] == counts[1]


def test_retrying_cancelled_runs_cannot_take_an_owner_over_its_pending_quota(api, alice):
    """Trigger to the quota, cancel, trigger again, then retry the cancelled: pending 6 of 3."""
    set_owner_policy(alice, max_pending=3)
    job = api.post("/api/jobs/", {"handler": "echo", "schedule": "@daily"}, format="json")
    trigger = f"/api/jobs/{job.json()['id']}/trigger/"
    first = [api.post(trigger).json()["id"] for _ in range(3)]
    assert api.post(trigger).status_code == 403
    for run_id in first:
        assert api.post(f"/api/runs/{run_id}/cancel/").status_code == 200
    assert [api.post(trigger).status_code for _ in range(3)] == [201] * 3

    refused = api.post(f"/api/runs/{first[0]}/retry/")

    assert refused.status_code == 403
    assert (refused.json()["limit"], refused.json()["value"]) == ("max_pending", 3)
    assert "at most 3 runs waiting" in refused.json()["detail"]
    assert Run.objects.filter(state__in=PENDING_STATES).count() == 3
    assert Run.objects.get(pk=first[0]).state == RunState.CANCELLED


def dead_runs(owner, count: int) -> list[Run]:
    job = one_off(owner)
    Run.objects.filter(job=job).delete()
    now = datetime.now(UTC)
    return [Run.objects.create(job=job, scheduled_at=now - timedelta(seconds=i), run_at=now,
                               finished_at=now, state=RunState.DEAD, attempt=1,
                               max_attempts=1)
            for i in range(count)]


def test_bulk_requeues_of_the_dead_letter_stop_at_the_pending_quota(api, alice, admin_client):
    """Every other way back to the queue (REST bulk, manage.py deadletter, the admin's
    actions) requeues only as many runs as the owner's max_pending leaves room for."""
    set_owner_policy(alice, max_pending=4)
    dead = dead_runs(alice, 8)
    pending = Run.objects.filter(state__in=PENDING_STATES)

    bulk = api.post("/api/dead-letter/requeue/", {}, format="json").json()
    assert (bulk["matched"], bulk["requeued"]) == (8, 4) and pending.count() == 4

    Run.objects.filter(pk__in=[r.pk for r in dead]).update(state=RunState.DEAD)
    set_owner_policy(alice, max_pending=5)
    out = StringIO()
    call_command("deadletter", "requeue", stdout=out)
    assert pending.count() == 5 and "pending-runs quota" in out.getvalue()

    Run.objects.filter(pk__in=[r.pk for r in dead]).update(state=RunState.DEAD)
    set_owner_policy(alice, max_pending=6)
    for url, action in (("/admin/runs/deadrun/", "requeue_dead"),
                        ("/admin/runs/run/", "requeue_runs")):
        page = admin_client.post(url, {"action": action, "confirm": "yes",
                                       "_selected_action": [str(r.pk) for r in dead]},
                                 follow=True)
        assert "max_pending" in page.content.decode()
        assert pending.count() == 6
