"""Owner alerts (docs/alerts.md): a run that dies tells its owner once per channel, a
burst sends a bounded digest, misfire skips and late starts are alerted on when asked,
signals and the outcome line come after the commit. Real PostgreSQL and Redis,
in-process workers and dispatcher steps."""

import json
import logging
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.db.models import F
from django.test import override_settings

from jobs import services
from jobs.models import Job, MisfirePolicy
from jobs.registry import handler
from jobs.schedules.scheduler import Scheduler
from runs import signals
from runs.alerts import late, webhook
from runs.alerts.deliver import deliver, prune_delivered
from runs.alerts.models import (
    AlertChannelState,
    AlertEvent,
    AlertKind,
    AlertPolicy,
    new_secret,
)
from runs.alerts.policy import WEBHOOK_HANDLER
from runs.brokers import get_broker
from runs.clock import db_now
from runs.execution.outcomes import counts
from runs.execution.transitions import expire_leases, run_refs
from runs.history.retention import prune
from runs.models import Run, RunState
from runs.worker import Worker
from tests import http_server
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True)


@handler("tests.alerts_fail")
def alerts_fail(ctx, payload):
    raise RuntimeError("the upstream said no")


@pytest.fixture
def owner():
    return User.objects.create_user("olga", email="olga@example.com")


def kill(runs: list[Run]) -> None:
    """Make ``runs`` die as the dispatcher's reap makes them: running on their last
    attempt under a lease that expired."""
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(
        state=RunState.RUNNING, attempt=1, max_attempts=1,
        lease_expires_at=db_now() - timedelta(seconds=5))
    while expire_leases(1000, "default"):
        pass
    assert Run.objects.filter(pk__in=[r.pk for r in runs], state=RunState.DEAD).count() \
        == len(runs)


def webhook_jobs(owner) -> list[Job]:
    return list(Job.objects.filter(owner=owner, handler=WEBHOOK_HANDLER).order_by("pk"))


def test_a_run_that_dies_tells_its_owner_once_by_email_with_signals_and_a_line(
        rb, owner, caplog):
    got = []

    def receiver(signal, **kwargs):
        got.append((signal, kwargs["run_id"], kwargs["attempt"], kwargs["outcome"]))

    for signal in (signals.run_failed, signals.run_dead, signals.run_succeeded,
                   signals.run_retrying):
        signal.connect(receiver)
    try:
        [run] = make_runs("default", 1, handler="tests.alerts_fail", max_attempts=1,
                          owner=owner)
        rb.push(run_refs(Run.objects.filter(pk=run.pk)))
        with caplog.at_level(logging.INFO, logger="scheduler.runs"):
            Worker(["default"], concurrency=1, burst=True).serve()
    finally:
        for signal in (signals.run_failed, signals.run_dead, signals.run_succeeded,
                       signals.run_retrying):
            signal.disconnect(receiver)

    assert Run.objects.get(pk=run.pk).state == RunState.DEAD
    assert got == [(signals.run_failed, run.pk, 1, "failed"),
                   (signals.run_dead, run.pk, 1, "failed")]
    [line] = [r for r in caplog.records if r.name == "scheduler.runs"]
    assert line.getMessage().startswith(f"run {run.pk} failed, dead (job {run.job_id}, "
                                        f"handler tests.alerts_fail, attempt 1 in ")
    assert line.getMessage().endswith("RuntimeError: the upstream said no")
    assert (line.run_id, line.job_id, line.handler, line.attempt, line.outcome,
            line.state) == (run.pk, run.job_id, "tests.alerts_fail", 1, "failed", "dead")
    assert line.duration_s >= 0

    assert deliver() == 1
    assert deliver() == 0
    [email] = mail.outbox
    assert email.to == ["olga@example.com"]
    assert email.subject == f"[scheduler] dead: run {run.pk} of job {run.job_id}"
    assert "RuntimeError: the upstream said no" in email.body
    assert webhook_jobs(owner) == []  # no webhook URL: no webhook
    assert ("default", "dead", 1) in counts("default")  # flushed when the worker stopped


@pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
def test_the_outcome_line_names_job_and_handler_when_the_lease_did_not_bring_them(
        caplog, monkeypatch):
    monkeypatch.setenv("SCHEDULER_BROKER", "database")
    # The database broker on SQLite leases without the task (the worker reads it apart).
    olga = User.objects.db_manager("sqlite").create_user("olga", email="o@example.com")
    [run] = make_runs("sqlite", 1, handler="tests.alerts_fail", max_attempts=1, owner=olga)
    get_broker("sqlite", name="database").push(run_refs(Run.objects.using("sqlite")
                                                        .filter(pk=run.pk)))
    with caplog.at_level(logging.INFO, logger="scheduler.runs"):
        Worker(["default"], concurrency=1, burst=True, using="sqlite").serve()

    lines = [r for r in caplog.records if r.name == "scheduler.runs"]
    assert [(r.job_id, r.handler, r.attempt, r.state) for r in lines] == [
        (run.job_id, "tests.alerts_fail", 1, "dead")]
    assert lines[0].getMessage().startswith(
        f"run {run.pk} failed, dead (job {run.job_id}, handler tests.alerts_fail, "
        f"attempt 1 in ")


def test_500_deaths_at_once_send_one_digest_per_channel(db, owner):
    AlertPolicy.objects.create(owner=owner, webhook_url="https://hooks.example.com/a")
    runs = make_runs("default", 500, handler="tests.alerts_fail", owner=owner)
    kill(runs)
    assert AlertEvent.objects.filter(owner=owner, kind=AlertKind.DEAD).count() == 500

    assert deliver() == 2
    assert deliver() == 0
    [email] = mail.outbox
    assert email.subject == "[scheduler] digest: 500 alerts (500 dead)"
    assert email.body.endswith("... and 480 more")
    [job] = webhook_jobs(owner)
    body = job.payload["body"]
    assert '"total":500' in body and '"type":"digest"' in body
    assert Run.objects.filter(job=job).count() == 1


def test_after_the_first_alert_a_burst_waits_for_one_digest_at_the_windows_end(db, owner):
    AlertPolicy.objects.create(owner=owner, webhook_url="https://hooks.example.com/a")
    kill(make_runs("default", 1, handler="tests.alerts_fail", owner=owner))
    assert deliver() == 2  # the first alert goes at once, on both channels
    kill(make_runs("default", 499, handler="tests.alerts_fail", owner=owner))

    assert deliver() == 0  # within the window: nothing more
    assert len(mail.outbox) == 1
    AlertChannelState.objects.update(last_sent_at=F("last_sent_at") - timedelta(minutes=1))
    assert deliver() == 2
    assert deliver() == 0
    assert [m.subject.split(":")[0] for m in mail.outbox] == ["[scheduler] dead",
                                                             "[scheduler] digest"]
    assert mail.outbox[1].subject == "[scheduler] digest: 499 alerts (499 dead)"
    assert len(webhook_jobs(owner)) == 2
    assert not AlertEvent.objects.filter(email_pending=True).exists()
    assert not AlertEvent.objects.filter(webhook_pending=True).exists()


def test_a_jobs_policy_overrides_its_owners(db, owner):
    AlertPolicy.objects.create(owner=owner, email=True)
    quiet, loud = (make_runs("default", 1, handler="tests.alerts_fail", owner=owner)[0]
                   for _ in range(2))
    AlertPolicy.objects.create(job_id=quiet.job_id, on_dead=False)
    kill([quiet, loud])

    assert list(AlertEvent.objects.values_list("run_id", flat=True)) == [loud.pk]


def test_runs_without_an_owner_or_a_policy_that_says_no_raise_nothing(db, owner):
    AlertPolicy.objects.create(owner=owner, email=False)
    kill(make_runs("default", 3, handler="tests.alerts_fail", owner=owner)
         + make_runs("default", 2, handler="tests.alerts_fail"))

    assert not AlertEvent.objects.exists()


def test_the_webhook_is_signed_with_the_owners_secret_and_a_timestamp(db, owner):
    policy = AlertPolicy.objects.create(owner=owner, email=False,
                                        webhook_url="https://hooks.example.com/a")
    kill(make_runs("default", 1, handler="tests.alerts_fail", owner=owner))
    deliver()

    [job] = webhook_jobs(owner)
    payload = job.payload
    body, headers = payload["body"].encode(), payload["headers"]
    signature = headers[webhook.SIGNATURE_HEADER]
    assert webhook.verify(policy.webhook_secret, body, signature)
    assert not webhook.verify(policy.webhook_secret, body + b" ", signature)
    assert not webhook.verify("another secret", body, signature)
    stamp = int(headers[webhook.TIMESTAMP_HEADER])
    assert not webhook.verify(policy.webhook_secret, body, signature,
                              now=stamp + webhook.TOLERANCE_S + 1)
    assert (payload["method"], payload["url"]) == ("POST", "https://hooks.example.com/a")


def test_an_owner_without_email_address_is_skipped_not_retried(db):
    nobody = User.objects.create_user("nomail")
    kill(make_runs("default", 1, handler="tests.alerts_fail", owner=nobody))

    assert deliver() == 1
    assert mail.outbox == []
    assert not AlertEvent.objects.filter(email_pending=True).exists()


def test_misfire_skips_are_alerted_when_asked(db, owner, settings):
    settings.SCHEDULER = {"MISFIRE_GRACE_S": 60}
    AlertPolicy.objects.create(owner=owner, on_misfire=True)
    job = services.create_job("noop", cron="* * * * *", owner=owner,
                              misfire_policy=MisfirePolicy.SKIP)
    Job.objects.filter(pk=job.pk).update(next_run_at=db_now() - timedelta(minutes=5))

    Scheduler().tick()

    [event] = AlertEvent.objects.filter(kind=AlertKind.MISFIRE)
    assert (event.owner_id, event.job_id, event.run_id) == (owner.pk, job.pk, None)
    assert "skipped by its misfire policy skip" in event.detail
    deliver()
    assert mail.outbox[0].subject == f"[scheduler] misfire: run None of job {job.pk}"


def test_a_workflow_schedules_misfire_skips_are_alerted_as_a_cron_jobs(db, owner, settings):
    from workflows import services as workflows
    from workflows.models import Workflow, WorkflowRun
    from workflows.ticks import start_scheduled

    settings.SCHEDULER = {"MISFIRE_GRACE_S": 60}
    AlertPolicy.objects.create(owner=owner, on_misfire=True)
    wf = workflows.create_workflow("nightly etl", [{"name": "a", "handler": "noop"}],
                                   owner=owner, schedule={"cron": "* * * * *",
                                                          "misfire_policy": "skip"})
    Workflow.objects.filter(pk=wf.pk).update(next_run_at=db_now() - timedelta(minutes=5))

    start_scheduled([0], 1, "default")

    [event] = AlertEvent.objects.filter(kind=AlertKind.MISFIRE)
    assert (event.owner_id, event.job_id, event.run_id) == (owner.pk, None, None)
    assert event.detail.startswith(f"workflow {wf.pk} (nightly etl): ")
    assert "skipped by its misfire policy skip" in event.detail
    # Only the occurrences within the grace ran (none older than a minute).
    assert all(r.scheduled_at >= db_now() - timedelta(seconds=61)
               for r in WorkflowRun.objects.filter(workflow=wf))
    deliver()
    assert mail.outbox[0].subject == f"[scheduler] misfire: workflow {wf.pk} (nightly etl)"


def test_a_run_waiting_past_the_threshold_is_alerted_once(db, owner):
    AlertPolicy.objects.create(owner=owner, late_after_s=30)
    [waiting] = make_runs("default", 1, owner=owner, delay_s=-60)
    make_runs("default", 1, owner=owner, delay_s=-5)  # within the threshold

    assert late.scan() == 1
    assert late.scan() == 0
    [event] = AlertEvent.objects.all()
    assert (event.kind, event.run_id) == (AlertKind.LATE, waiting.pk)


def test_the_api_sets_an_owners_and_a_jobs_policy(api, alice):
    job = services.create_job("noop", owner=alice, delay_s=60)

    got = api.get("/api/alerts/").json()
    assert got["effective"] == {"email": True, "webhook": True, "on_dead": True,
                                "on_misfire": False, "late_after_s": 0}
    put = api.put("/api/alerts/", {"webhook_url": "https://hooks.example.com/x",
                                   "on_misfire": True}, format="json")
    assert put.status_code == 200, put.content
    secret = put.json()["webhook_secret"]
    assert len(secret) >= 40
    rotated = api.put("/api/alerts/", {"rotate_secret": True}, format="json").json()
    assert rotated["webhook_secret"] != secret
    assert rotated["webhook_url"] == "https://hooks.example.com/x"

    put = api.put(f"/api/jobs/{job.pk}/alerts/", {"email": False, "late_after_s": 90},
                  format="json")
    assert put.status_code == 200, put.content
    assert put.json()["effective"] == {"email": False, "webhook": True, "on_dead": True,
                                       "on_misfire": True, "late_after_s": 90}
    bad = api.put(f"/api/jobs/{job.pk}/alerts/", {"late_after_s": -1}, format="json")
    assert bad.status_code == 400 and "late_after_s" in bad.json()
    assert AlertPolicy.objects.get(job=job).late_after_s == 90  # nothing half-stored
    assert api.delete(f"/api/jobs/{job.pk}/alerts/").status_code == 204
    assert not AlertPolicy.objects.filter(job=job).exists()


@pytest.mark.parametrize("body, refused", [
    ({"on_dead": False, "colour": "red"}, ["colour"]),
    ({"on_dead": False, "effective": {"email": False}}, ["effective"]),
    ({"on_dead": False, "webhook_secret": "mine"}, ["webhook_secret"]),
])
@pytest.mark.parametrize("where", ["owner", "job"])
def test_a_put_naming_an_unknown_or_read_only_field_is_a_400_naming_it(api, alice, body,
                                                                       refused, where):
    """Both PUTs ignored such fields silently, where every other endpoint answers 400:
    a client setting webhook_secret believed it had."""
    job = services.create_job("noop", owner=alice, delay_s=60)
    path = "/api/alerts/" if where == "owner" else f"/api/jobs/{job.pk}/alerts/"

    response = api.put(path, body, format="json")

    assert response.status_code == 400, response.content
    if where == "job" and refused == ["webhook_secret"]:
        assert "unknown field" in response.json()["webhook_secret"][0]
    for name in refused:
        assert name in response.json()
    assert not AlertPolicy.objects.exists()


def test_another_owners_job_alerts_are_not_found(api):
    bob = User.objects.create_user("bob")
    job = services.create_job("noop", owner=bob, delay_s=60)

    assert api.get(f"/api/jobs/{job.pk}/alerts/").status_code == 404
    assert api.put(f"/api/jobs/{job.pk}/alerts/", {"email": False},
                   format="json").status_code == 404


def test_the_admin_edits_policies_without_showing_the_secret(client, owner):
    row = AlertPolicy.objects.create(owner=owner, webhook_url="https://hooks.example.com/a")
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))

    page = client.get(f"/admin/runs/alertpolicy/{row.pk}/change/")
    assert page.status_code == 200
    assert b"https://hooks.example.com/a" in page.content
    assert row.webhook_secret.encode() not in page.content
    client.post("/admin/runs/alertpolicy/", {"action": "rotate_secret",
                                            "_selected_action": [row.pk]})
    assert AlertPolicy.objects.get(pk=row.pk).webhook_secret != row.webhook_secret


def test_a_webhook_delivery_that_dies_is_told_by_email_only(db, owner):
    AlertPolicy.objects.create(owner=owner, webhook_url="https://hooks.example.com/a")
    kill(make_runs("default", 1, handler="tests.alerts_fail", owner=owner))
    deliver()
    [job] = webhook_jobs(owner)

    kill(list(Run.objects.filter(job=job)))

    event = AlertEvent.objects.get(job=job)
    assert (event.email_pending, event.webhook_pending) == (True, False)


@override_settings(SCHEDULER={"HTTP_ALLOWLIST": "127.0.0.1"})
def test_a_run_that_dies_sends_one_email_and_one_webhook_that_verifies(rb, owner):
    server = http_server.start()
    try:
        policy = AlertPolicy.objects.create(owner=owner, webhook_url=f"{server.url}/echo")
        [run] = make_runs("default", 1, handler="tests.alerts_fail", max_attempts=1,
                          owner=owner)
        rb.push(run_refs(Run.objects.filter(pk=run.pk)))
        Worker(["default"], concurrency=1, burst=True).serve()
        assert deliver() == 2
        Worker(["default"], concurrency=1, burst=True).serve()  # the webhook's run
        assert deliver() == 0
    finally:
        http_server.stop(server)

    assert len(mail.outbox) == 1
    [(method, path, headers, body)] = server.requests
    assert (method, path) == ("POST", "/echo")
    headers = {name.lower(): value for name, value in headers.items()}
    assert webhook.verify(policy.webhook_secret, body, headers["x-scheduler-signature"])
    assert not webhook.verify(new_secret(), body, headers["x-scheduler-signature"])
    message = json.loads(body)
    assert (message["type"], message["total"]) == ("alert", 1)
    assert message["alerts"][0]["run_id"] == run.pk
    [delivery] = Run.objects.filter(job__in=webhook_jobs(owner))
    assert delivery.state == RunState.SUCCEEDED
    assert delivery.result["status"] == 200


def test_a_private_webhook_address_is_refused_by_the_guard(rb, owner):
    server = http_server.start()
    try:
        AlertPolicy.objects.create(owner=owner, email=False, webhook_url=f"{server.url}/echo")
        kill(make_runs("default", 1, handler="tests.alerts_fail", owner=owner))
        deliver()
        Worker(["default"], concurrency=1, burst=True).serve()
    finally:
        http_server.stop(server)

    assert server.requests == []
    [delivery] = Run.objects.filter(job__in=webhook_jobs(owner))
    assert "HTTP_ALLOWLIST" in delivery.error


def test_pruning_a_run_alerted_on_late_keeps_the_alert(db, owner):
    AlertPolicy.objects.create(owner=owner, late_after_s=30)
    [run] = make_runs("default", 1, owner=owner, delay_s=-60)
    assert late.scan() == 1
    long_ago = db_now() - timedelta(days=30)
    Run.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED, finished_at=long_ago)

    pruned = prune(db_now() - timedelta(days=1), 100)

    assert (pruned.runs, pruned.jobs) == (1, 1)
    [event] = AlertEvent.objects.all()
    assert (event.run_id, event.job_id) == (run.pk, run.job_id)  # ids kept as numbers



def test_pruning_a_one_off_job_drops_its_alert_overrides_only(db, owner):
    [old, kept] = (make_runs("default", 1, owner=owner)[0] for _ in range(2))
    AlertPolicy.objects.create(job_id=old.job_id, on_dead=False)
    AlertPolicy.objects.create(job_id=kept.job_id, on_dead=False)
    long_ago = db_now() - timedelta(days=30)
    Run.objects.filter(pk=old.pk).update(state=RunState.SUCCEEDED, finished_at=long_ago)

    assert prune(db_now() - timedelta(days=1), 100).jobs == 1

    assert list(AlertPolicy.objects.values_list("job_id", flat=True)) == [kept.job_id]



def test_delivered_alerts_are_pruned_with_the_history(db, owner):
    kill(make_runs("default", 3, handler="tests.alerts_fail", owner=owner))
    deliver()  # the three as one digest
    kill(make_runs("default", 1, handler="tests.alerts_fail", owner=owner))
    deliver()  # within the window: it waits
    AlertEvent.objects.update(created_at=db_now() - timedelta(days=8))
    assert AlertEvent.objects.filter(email_pending=True).count() == 1

    assert prune_delivered() == 3
    assert prune_delivered() == 0
    assert AlertEvent.objects.filter(email_pending=True).count() == 1


def test_catch_up_runs_are_late_on_purpose_and_not_alerted_late(db, owner):
    # Resume's catch_up=all makes the runs of a paused interval, due minutes ago: they
    # are left out of lag (docs/cron.md, "Catch-up runs"), so out of late alerts too.
    AlertPolicy.objects.create(owner=owner, late_after_s=30)
    job = services.create_job("noop", cron="* * * * *", owner=owner)
    paused_at = db_now() - timedelta(minutes=10)
    Job.objects.filter(pk=job.pk).update(
        status=Job.Status.PAUSED, paused_at=paused_at,
        next_run_at=paused_at.replace(second=0, microsecond=0) + timedelta(minutes=1))
    services.resume([job.pk], catch_up="all")
    assert Run.objects.filter(job=job, catch_up=True).count() >= 8
    [waiting] = make_runs("default", 1, owner=owner, delay_s=-60)

    assert late.scan() == 1
    [event] = AlertEvent.objects.all()
    assert (event.kind, event.run_id) == (AlertKind.LATE, waiting.pk)
