"""No page shows an encrypted value (docs/security.md, "Encrypted values"): every GET
route of the URLconf (the REST API, the admin's dashboard) and every admin page (the
changelist and the change form of every object of every registered model), as a
superuser, a staff user who may only view, and an ordinary tenant, and the answers of
the create and change endpoints, hold nothing shaped like a token of the encryption in
use (Fernet: ``gAAAAA`` and base64) and no secret header's value.

The world they walk holds http jobs with secrets (one-off and cron, two owners), a
workflow with an http node, runs with attempts, log lines and errors from the handler,
a dead run and an alert webhook job.
"""

import json
import logging
import re
from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from jobs import services
from jobs.models import Job
from runs.alerts.webhook import enqueue
from runs.context import RunContext
from runs.models import Attempt, AttemptOutcome, LogLine, Run, RunState
from runs.outbound.handler import http as http_coroutine
from runs.outbound.payload import http_payload
from tests import http_server
from tests.test_api_helpers import client_for
from workflows import services as workflow_services

# The handler is a coroutine (docs/async-handlers.md); its ORM reads run on this thread.
http = async_to_sync(http_coroutine)

pytestmark = pytest.mark.django_db
server = pytest.fixture(http_server.serving)
# A Fernet token: version byte 0x80 and a 64-bit timestamp, base64url: "gAAAAA" and more.
TOKEN = re.compile(r"gAAAAA[A-Za-z0-9_=\-]{20,}")
REDACTED = "(encrypted)"  # runs/outbound/redact.py: what is shown instead
SECRETS = {"alice": "Bearer s3cret-of-alice", "bob": "Bearer s3cret-of-bob",
           "sig": "s1gnature-of-alice"}
ROLES = ("superuser", "viewer", "tenant")
NOT_WALKED = ("logout", "password", "autocomplete", "jsi18n", "/r/", "login")


def leaks(text: str) -> list[str]:
    """What of ``text`` is a token or a secret's value."""
    return TOKEN.findall(text) + [value for value in SECRETS.values() if value in text]


def ctx(job_id: int) -> RunContext:
    now = datetime.now(UTC)
    return RunContext(run_id=1, job_id=job_id, attempt=1, scheduled_at=now, deadline=now,
                      handler="http", logger=logging.getLogger("tests.walk"))


def failed_run(job: Job, url_error: str, state=RunState.RETRYING) -> Run:
    """A run of ``job`` with one failed attempt whose error and log line are the
    handler's own (it was called against the test server)."""
    try:
        http(ctx(job.pk), job.payload)
        error = ""
    except Exception as exc:  # noqa: BLE001 - whatever it raised is what a run stores
        error = f"{type(exc).__name__}: {exc}"
    assert error, url_error
    now = datetime.now(UTC)
    run = Run.objects.create(job=job, scheduled_at=now, run_at=now, state=state, error=error,
                             finished_at=now, attempt=1, max_attempts=1)
    attempt = Attempt.objects.create(run=run, number=1, worker_id="w1", started_at=now,
                                     finished_at=now, outcome=AttemptOutcome.FAILED, error=error)
    LogLine.objects.create(attempt=attempt, created_at=now, level=logging.WARNING,
                           logger="scheduler.handler", message=f"http GET: {error}")
    return run


@pytest.fixture
def world(server):
    root = User.objects.create_superuser("root", password="pw")
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    alice = User.objects.create_user("alice", password="pw")
    bob = User.objects.create_user("bob", password="pw")
    echo, dead = f"{server.url}/echo", f"{server.url}/status/404"
    with http_server.LOOPBACK:
        own = services.create_job("http", http_payload(
            dead, headers={"Authorization": SECRETS["alice"], "X-Sig": SECRETS["sig"]},
            secret_headers=["X-Sig"]), owner=alice, delay_s=600)
        services.create_jobs([{"handler": "http", "cron": "*/5 * * * *", "payload": http_payload(
            echo, headers={"Authorization": SECRETS["alice"]})}], owner=alice)
        other = services.create_job("http", http_payload(f"{server.url}/status/503", headers={
            "Cookie": SECRETS["bob"]}), owner=bob, delay_s=600)
        flow = workflow_services.create_workflow("flow", [
            {"name": "call", "handler": "http", "payload": {
                "url": echo, "headers": {"Authorization": SECRETS["alice"]}}},
            {"name": "after", "handler": "echo", "payload": {}}], [["call", "after"]],
            owner=alice)
        workflow_services.trigger(flow)
        failed_run(Job.objects.get(pk=own.pk), "404", state=RunState.DEAD)
        failed_run(Job.objects.get(pk=other.pk), "503")
        enqueue(alice.pk, echo, "whsec", {"event": "dead"}, "d-1", datetime.now(UTC),
                "default")
    stored = json.dumps(list(Job.objects.values_list("payload", flat=True)))
    assert len(TOKEN.findall(stored)) >= 4  # the walk has tokens to find
    return {"superuser": root, "viewer": viewer, "tenant": alice}


def routes(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def get_paths() -> list[str]:
    """Every GET-able path of the URLconf outside the admin's model pages (walked by
    model below), each id parameter filled with every object's id."""
    ids = sorted({*Job.objects.values_list("pk", flat=True),
                  *Run.objects.values_list("pk", flat=True),
                  *workflow_ids()})
    paths = set()
    for route in routes(get_resolver().url_patterns):
        if "format" in route or any(word in route for word in NOT_WALKED):
            continue
        if route.startswith("admin/") and not route.startswith("admin/dashboard/"):
            continue
        path = "/" + route.replace("^", "").replace("$", "")
        params = re.findall(r"<int:\w+>|\(\?P<\w+>\\d\+\)", path)
        if not params:
            paths.add(path)
            continue
        assert len(params) == 1, path
        paths.update(path.replace(params[0], str(i)) for i in ids)
    return sorted(paths)


def workflow_ids() -> set[int]:
    from workflows.models import Workflow, WorkflowRun
    return {*Workflow.objects.values_list("pk", flat=True),
            *WorkflowRun.objects.values_list("pk", flat=True)}


def admin_paths() -> list[str]:
    """The changelist and every object's change form of every registered model."""
    paths = ["/admin/"]
    for model in admin.site._registry:
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        paths.append(reverse(f"{name}_changelist"))
        for pk in model._default_manager.values_list("pk", flat=True)[:20]:
            paths.append(reverse(f"{name}_change", args=[quote(pk)]))
    return paths


@pytest.mark.parametrize("role", ROLES)
def test_no_api_answer_shows_a_token_or_a_secret(world, role):
    api = client_for(world[role])
    shown = {}
    for path in get_paths():
        answer = api.get(path)
        text = answer.content.decode("utf-8", "replace")
        assert not leaks(text), (role, path, leaks(text)[:2])
        shown[path] = answer.status_code, text
    own = Job.objects.filter(owner__username="alice", handler="http").order_by("pk")[0]
    status, text = shown[f"/api/jobs/{own.pk}/"]
    assert status == 200 and REDACTED in text  # the walk saw a payload with secrets
    assert sum(status == 200 for status, _ in shown.values()) > 20


@pytest.mark.parametrize("role", ROLES)
def test_no_admin_page_shows_a_token_or_a_secret(world, role, client):
    client.force_login(world[role])
    ok = 0
    for path in [*admin_paths(), *[p for p in get_paths() if p.startswith("/admin/")]]:
        answer = client.get(path)
        text = answer.content.decode("utf-8", "replace")
        assert not leaks(text), (role, path, leaks(text)[:2])
        ok += answer.status_code == 200
    if role != "tenant":  # a tenant is sent to the login page
        own = Job.objects.filter(owner__username="alice", handler="http").order_by("pk")[0]
        page = client.get(reverse("admin:jobs_job_change", args=[own.pk]))
        assert page.status_code == 200 and REDACTED in page.content.decode()
        assert ok > 30


def test_create_and_change_answers_show_no_token_or_secret(world):
    api = client_for(world["tenant"])
    payload = {"url": "https://hooks.example.com/x",
               "headers": {"Authorization": SECRETS["alice"]}}
    answers = [
        api.post("/api/jobs/", {"handler": "http", "delay_s": 600, "payload": payload},
                 format="json"),
        api.post("/api/jobs/bulk/", {"jobs": [{"handler": "http", "delay_s": 600,
                                               "payload": payload}] * 2}, format="json"),
        api.post("/api/workflows/", {"name": "w2", "nodes": [
            {"name": "n", "handler": "http", "payload": payload}]}, format="json"),
    ]
    job_id = answers[0].json()["id"]
    answers += [
        api.patch(f"/api/jobs/{job_id}/", {"payload": {**payload, "headers": {
            "X-Api-Key": SECRETS["sig"]}}}, format="json"),
        api.patch(f"/api/jobs/{job_id}/", {"priority": 4}, format="json"),
        api.post(f"/api/jobs/{job_id}/trigger/"),
    ]
    for answer in answers:
        assert answer.status_code in (200, 201), answer.content
        assert not leaks(answer.content.decode()), answer.content
