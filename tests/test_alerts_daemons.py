"""Owner alerts end to end with real daemons (docs/alerts.md): a run that dies under a
worker process is delivered by the dispatcher's own loop, as one email (Django's file
backend) and one webhook run that a real local HTTP server receives and whose signature
verifies."""

import pytest
from django.contrib.auth.models import User

from runs.alerts import webhook
from runs.alerts.models import AlertPolicy
from runs.execution.transitions import run_refs
from runs.models import Run, RunState
from tests import http_server
from tests.conftest import daemon_env, make_runs, start_daemon, stop, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_a_dying_run_is_told_by_the_dispatcher_by_email_and_webhook(rb, tmp_path):
    owner = User.objects.create_user("olga", email="olga@example.com")
    server = http_server.start()
    policy = AlertPolicy.objects.create(owner=owner, webhook_url=f"{server.url}/echo")
    [run] = make_runs("default", 1, handler="always_fails", max_attempts=1, owner=owner)
    rb.push(run_refs(Run.objects.filter(pk=run.pk)))
    mails = tmp_path / "mail"
    env = daemon_env("redis", HTTP_ALLOWLIST="127.0.0.1", ALERT_POLL_S=0.2)
    env.update(EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
               EMAIL_FILE_PATH=str(mails))
    daemons = [start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log"),
               start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / "w.log")]
    try:
        wait_until(lambda: server.requests, timeout=60, message="the webhook")
        wait_until(lambda: mails.exists() and list(mails.iterdir()), timeout=30,
                   message="the email")
    finally:
        stop(*daemons)
        http_server.stop(server)

    assert Run.objects.get(pk=run.pk).state == RunState.DEAD
    [email] = list(mails.iterdir())
    text = email.read_text()
    assert "To: olga@example.com" in text
    assert f"Subject: [scheduler] dead: run {run.pk} of job {run.job_id}" in text
    [(method, _, headers, body)] = server.requests
    headers = {name.lower(): value for name, value in headers.items()}
    assert method == "POST"
    assert webhook.verify(policy.webhook_secret, body, headers["x-scheduler-signature"])
