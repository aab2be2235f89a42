"""What a server process checks before it starts: the scheduler's system checks
(scheduler_core/checks.py, runs/checks.py, jobs/checks.py), deployment ones included,
and it refuses to start on an error (docs/security.md, "System checks"). With DEBUG off
that refuses a missing, development or weak SECRET_KEY, and the web server also an empty
ALLOWED_HOSTS or '*' in it.

Called by scheduler_project/wsgi.py (gunicorn, and runserver, which loads the same WSGI
application), by every daemon command (runs/daemons/command.py) and by ``runall``. Other
management commands (migrate, createsuperuser) still run, so that a deployment can be
prepared before its secret is in place; ``check --deploy`` reports every problem.

This module is imported by settings.py: it must not read django.conf.settings at import.
"""

import logging

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

log = logging.getLogger("scheduler.startup")

# Django's own marker for a key nobody may rely on (startproject writes such keys, and
# ``check --deploy`` flags the prefix as security.W009).
INSECURE_PREFIX = "django-insecure-"
DEV_SECRET_KEY = INSECURE_PREFIX + "dev-only-key-of-a-fresh-clone-never-use-it-in-production"
GENERATE_KEY = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
# The system checks' tags (scheduler_core/checks.py): what every process needs, and
# what only the web server does.
TAG, WEB_TAG = "scheduler", "scheduler_web"


class InsecureStart(CommandError, ImproperlyConfigured):
    """A server was about to start with settings that expose it. A CommandError, so that
    management commands (runserver, the daemons, runall) print the message and exit 1
    without a traceback; an ImproperlyConfigured for the WSGI loader (gunicorn logs it and
    stops with "Worker failed to boot")."""


def _messages(web: bool) -> list:
    """The scheduler's system checks' messages (django.core.checks.CheckMessage), not
    silenced: those tagged TAG, with ``web`` also WEB_TAG, deployment checks included.
    Runs no other check: Django's full set imports every URL configuration and view
    (half a second of a daemon's start-up on 2 cores)."""
    from django.core import checks

    found = checks.run_checks(tags=[TAG, WEB_TAG] if web else [TAG],
                              include_deployment_checks=True)
    return [message for message in found if not message.is_silenced()]


def problems(web: bool) -> list:
    """The messages of _messages(web) of level ERROR or above."""
    return [message for message in _messages(web) if message.is_serious()]


def refuse_insecure_start(what: str, web: bool = False) -> None:
    """Raise InsecureStart naming ``what`` (e.g. "runworker") and every error among the
    scheduler's system checks, each with its id and hint; log each warning (logger
    ``scheduler.startup``) and return when there is no error."""
    found = _messages(web)
    for message in found:
        if not message.is_serious():
            log.warning("%s: %s: %s", what, message.id, message.msg)
    errors = [message for message in found if message.is_serious()]
    if errors:
        raise InsecureStart(f"{what} refuses to start:\n" + "\n".join(
            f"- {message.id}: {message.msg}" + (f"\n{message.hint}" if message.hint else "")
            for message in errors) + "\nSee docs/security.md, \"System checks\".")


def proxy_ssl_header(header: str) -> tuple[str, str] | None:
    """SECURE_PROXY_SSL_HEADER from the name of the header a TLS-terminating proxy sets to
    "https" (e.g. "X-Forwarded-Proto"); None for an empty name. Raises
    ImproperlyConfigured for a name that is not an HTTP header name."""
    header = header.strip()
    if not header:
        return None
    if not header.replace("-", "").replace("_", "").isalnum():
        raise ImproperlyConfigured(
            f"SECURE_PROXY_SSL_HEADER={header!r}: give a header name such as X-Forwarded-Proto")
    return "HTTP_" + header.upper().replace("-", "_"), "https"
