"""No tenant's row can stop a daemon (docs/security.md, "Daemons' fault isolation"): a
poisoned row of each kind is planted directly in the database, as a row stored before
the validation refused it (or written by hand) would be, and real daemons (``manage.py
rundispatcher``, ``runscheduler``, ``runworker``) go on serving the other tenants; the
failure is counted in /metrics' scheduler_daemon_item_errors_total.

Each failed on the code before: the dispatcher exited on the alert e-mail's ValueError
(a linefeed in a header), the scheduler on a cron job's unknown timezone, and a cron
workflow's unknown timezone rolled back the whole batch of workflows every tick."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from prometheus_client import generate_latest

from jobs.models import Job, Schedule
from runs.alerts.models import AlertEvent, AlertKind, AlertPolicy
from runs.clock import db_now
from runs.daemons import isolation
from runs.daemons.daemon import Daemon
from runs.execution.transitions import run_refs
from runs.metrics.endpoint import registry
from runs.models import Run, RunState
from tests.conftest import daemon_env, make_runs, start_daemon, stop, wait_until
from workflows import services as workflows
from workflows.models import Workflow, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)


def env_for(tmp_path) -> dict:
    env = daemon_env("redis", ALERT_POLL_S=0.2, ALERT_DIGEST_WINDOW_S=1,
                     WORKFLOW_RECONCILE_S=1)
    env.update(EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
               EMAIL_FILE_PATH=str(tmp_path / "mail"))
    return env


def mails(tmp_path) -> list[str]:
    folder = tmp_path / "mail"
    return [path.read_text() for path in folder.iterdir()] if folder.exists() else []


def alive(proc, log) -> None:
    assert proc.poll() is None, f"the daemon exited: {log.read_text()[-3000:]}"


def counted(daemon: str, duty: str) -> int:
    return sum(n for d, u, n in isolation.counts() if (d, u) == (daemon, duty))


def exposed(daemon: str, duty: str) -> bool:
    text = generate_latest(registry).decode()
    return (f'scheduler_daemon_item_errors_total{{daemon="{daemon}",duty="{duty}"}}'
            in text)


def cron_job(owner, next_run_at, cron="* * * * *", timezone="UTC") -> Job:
    """A cron job planted directly in the database, as validation never made it."""
    schedule = Schedule.objects.create(cron=cron, timezone=timezone)
    return Job.objects.create(name="cron", handler="noop", owner=owner, schedule=schedule,
                              next_run_at=next_run_at, timeout_s=60)


def due_minute():
    """The start of the database clock's minute: an occurrence a scheduler makes at once."""
    return db_now("default").replace(second=0, microsecond=0)


@pytest.mark.slow
def test_an_alert_whose_delivery_raises_stops_neither_the_dispatcher_nor_others(
        rb, tmp_path):
    """A misfire alert of a workflow named with a linefeed (as an adversary found it),
    and an owner whose stored address holds one, which the mail library refuses on every
    try."""
    mallory = User.objects.create_user("mallory", email="mallory@example.com")
    eve = User.objects.create_user("eve", email="eve@example.com")
    User.objects.filter(pk=eve.pk).update(email="eve@example.com\nBcc: all@example.com")
    olga = User.objects.create_user("olga", email="olga@example.com")
    AlertPolicy.objects.create(owner=olga)
    now = db_now("default")
    AlertEvent.objects.create(
        owner=mallory, kind=AlertKind.MISFIRE, created_at=now, email_pending=True,
        detail="workflow 7 (nightly\nBcc: x@example.com): 1 occurrence(s) missed")
    AlertEvent.objects.create(owner=eve, kind=AlertKind.MISFIRE, created_at=now,
                              email_pending=True, detail="workflow 8 (w): missed")
    env, log = env_for(tmp_path), tmp_path / "dispatcher.log"
    daemons = [start_daemon(["rundispatcher"], env, log),
               start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / "w.log")]
    try:
        wait_until(lambda: counted("dispatcher", "email_alert"), timeout=60,
                   message="eve's e-mail to fail")
        wait_until(lambda: any("mallory@example.com" in m for m in mails(tmp_path)),
                   timeout=30, message="mallory's e-mail")
        # Then olga's work, which needs the dispatcher: a run due shortly (promoted
        # by it) and one that dies (its alert e-mailed by it).
        [later] = make_runs("default", 1, delay_s=0.5, owner=olga)
        [dying] = make_runs("default", 1, handler="always_fails", max_attempts=1,
                            owner=olga)
        rb.push(run_refs(Run.objects.filter(pk__in=[later.pk, dying.pk])))
        wait_until(lambda: Run.objects.get(pk=later.pk).state == RunState.SUCCEEDED,
                   timeout=60, message="olga's run to succeed")
        wait_until(lambda: any("olga@example.com" in m for m in mails(tmp_path)),
                   timeout=60, message="olga's alert e-mail")
        alive(daemons[0], log)
    finally:
        stop(*daemons)

    [mallorys] = [m for m in mails(tmp_path) if "To: mallory@example.com" in m]
    assert "Subject: [scheduler] misfire: workflow 7 (nightly Bcc\n" in mallorys
    assert "\nBcc:" not in mallorys.split("\n\n", 1)[0]  # no header of the tenant's making
    assert not any("eve@" in m for m in mails(tmp_path))
    assert AlertEvent.objects.get(owner=eve).email_pending  # tried again next window
    assert exposed("dispatcher", "email_alert")
    assert "Traceback" in log.read_text()  # the operator's log has it


@pytest.mark.slow
def test_a_cron_job_whose_schedule_raises_stops_neither_the_scheduler_nor_others(
        rb, tmp_path):
    mallory = User.objects.create_user("mallory")
    olga = User.objects.create_user("olga")
    start = due_minute()
    # The poisoned jobs first in the scheduler's claim order, in the same batch.
    cron_job(mallory, start - timedelta(minutes=1), timezone="Nowhere/Bogus")
    cron_job(mallory, start - timedelta(minutes=1), cron="every full moon")
    good = cron_job(olga, start)
    env, log = env_for(tmp_path), tmp_path / "scheduler.log"
    daemons = [start_daemon(["runscheduler"], env, log),
               start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log"),
               start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / "w.log")]
    try:
        wait_until(lambda: Run.objects.filter(job=good, state=RunState.SUCCEEDED).exists(),
                   timeout=60, message="olga's cron run to succeed")
        wait_until(lambda: counted("scheduler", "cron_job") >= 2, timeout=30,
                   message="both poisoned jobs counted")
        alive(daemons[0], log)
    finally:
        stop(*daemons)

    assert not Run.objects.filter(job__owner=mallory).exists()
    # Left as they were, for their owner to fix: nothing of theirs was skipped.
    assert set(Job.objects.filter(owner=mallory).values_list("next_run_at", flat=True)) == {
        start - timedelta(minutes=1)}
    assert exposed("scheduler", "cron_job")
    text = log.read_text()
    assert "Nowhere/Bogus" in text and "Traceback" in text


@pytest.mark.slow
def test_a_cron_workflow_whose_tick_raises_holds_back_no_other_workflow(rb, tmp_path):
    mallory = User.objects.create_user("mallory")
    olga = User.objects.create_user("olga")
    node = [{"name": "a", "handler": "noop"}]
    bad = workflows.create_workflow("bad", node, owner=mallory, schedule="* * * * *")
    good = workflows.create_workflow("good", node, owner=olga, schedule="* * * * *")
    bad.schedule.timezone = "Nowhere/Bogus"
    bad.schedule.save(update_fields=["timezone"])
    start = due_minute()
    Workflow.objects.filter(pk=bad.pk).update(next_run_at=start - timedelta(minutes=1))
    Workflow.objects.filter(pk=good.pk).update(next_run_at=start)
    env, log = env_for(tmp_path), tmp_path / "scheduler.log"
    daemons = [start_daemon(["runscheduler"], env, log),
               start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log"),
               start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / "w.log")]
    try:
        wait_until(lambda: WorkflowRun.objects.filter(workflow=good,
                                                      state="succeeded").exists(),
                   timeout=60, message="olga's workflow run to succeed")
        alive(daemons[0], log)
    finally:
        stop(*daemons)

    assert not WorkflowRun.objects.filter(workflow=bad).exists()
    assert counted("scheduler", "cron_workflow") >= 1
    assert exposed("scheduler", "cron_workflow")


class Flaky(Daemon):
    """A round that raises what no transient path knows, then works."""

    name = "flaky"
    interval_s = 0.0

    def __init__(self):
        super().__init__()
        self.calls = 0

    def round(self) -> bool:
        self.calls += 1
        if self.calls == 1:
            raise KeyError("a bug in one round")
        return True


def test_a_round_that_raises_is_counted_and_the_loop_goes_on(caplog):
    daemon = Flaky()

    daemon.serve(max_rounds=2)

    assert daemon.calls == 2
    assert counted("flaky", "round") == 1
    assert "flaky: round failed (KeyError" in caplog.text
    assert not daemon.faults.streaks  # the second round worked: the streak is over
