"""Helpers shared by the REST API tests (no tests here): users with token clients, and
runs in a given state with attempts and log lines, made directly in the database (the API
reads them; the broker is not involved)."""

import logging
from datetime import timedelta

from django.contrib.auth.models import Permission, User
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import services
from jobs.models import Job
from runs.models import Attempt, AttemptOutcome, LogLine, Run, RunState
from scheduler_core.rest.tokens import create_token


def client_for(user: User) -> APIClient:
    """An API client authenticated with a new token of ``user``."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {create_token(user)}")
    return api


def user_with(username: str, *perms: str, **fields) -> User:
    """A user holding Django permissions ``perms`` ("app_label.codename", e.g.
    "jobs.view_job"); ``fields`` as for create_user (is_staff=True, ...)."""
    user = User.objects.create_user(username, **fields)
    for name in perms:
        app_label, codename = name.split(".")
        user.user_permissions.add(Permission.objects.get(
            content_type__app_label=app_label, codename=codename))
    return User.objects.get(pk=user.pk)  # has_perm caches what a user held when first asked


def one_off(owner, handler="noop", delay_s=3600, **options) -> Job:
    """A one-off job of ``owner`` due in ``delay_s`` seconds (its run is pending)."""
    return services.create_job(handler, {}, owner=owner, delay_s=delay_s, **options)


def recurring(owner, cron="*/5 * * * *", **options) -> Job:
    return services.create_job("echo", {}, owner=owner, cron=cron, **options)


def finished_run(job: Job, state=RunState.DEAD, outcome=AttemptOutcome.FAILED,
                 error="Traceback ...\nHandlerFailure: boom", attempts=1,
                 logs=(("info", "starting"), ("warning", "disk almost full"),
                       ("error", "boom"))) -> Run:
    """A run of ``job`` that made ``attempts`` attempts, the last ending in ``outcome``,
    now in ``state``; each attempt carries the ``logs`` (level name, message)."""
    now = timezone.now()
    scheduled = now - timedelta(minutes=5, microseconds=Run.objects.count())
    run = Run.objects.create(
        job=job, scheduled_at=scheduled, run_at=scheduled, state=state, queue=job.queue,
        attempt=attempts, max_attempts=attempts, error=error if state == RunState.DEAD else "",
        started_at=scheduled, finished_at=now)
    # Made when it was scheduled, as the scheduler makes runs: lag counts from the later
    # of the two (runs/models.py, LAG_FROM).
    Run.objects.filter(pk=run.pk).update(created_at=scheduled)
    for number in range(1, attempts + 1):
        attempt = Attempt.objects.create(
            run=run, number=number, worker_id="host:1", started_at=scheduled + timedelta(
                seconds=number), finished_at=now, outcome=outcome, error=error)
        LogLine.objects.bulk_create([
            LogLine(attempt=attempt, created_at=now, level=logging.getLevelNamesMapping()[
                level.upper()], logger="jobs.handlers", message=f"{message} (try {number})")
            for level, message in logs])
    return run
