"""What a server process checks before it starts: with DEBUG off it refuses the
development SECRET_KEY (or none), and the web server refuses an empty ALLOWED_HOSTS
(docs/security.md, "Settings").

Called by scheduler_project/wsgi.py (gunicorn, and runserver, which loads the same WSGI
application), by every daemon command (runs/daemon_command.py) and by ``runall``. Other
management commands (migrate, createsuperuser, check) still run, so that a deployment can
be prepared before its secret is in place; ``check --deploy`` warns about the key.

This module is imported by settings.py: it must not read django.conf.settings at import.
"""

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

# Django's own marker for a key nobody may rely on (startproject writes such keys, and
# ``check --deploy`` flags the prefix as security.W009).
INSECURE_PREFIX = "django-insecure-"
DEV_SECRET_KEY = INSECURE_PREFIX + "dev-only-key-of-a-fresh-clone-never-use-it-in-production"
GENERATE_KEY = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"


class InsecureStart(CommandError, ImproperlyConfigured):
    """A server was about to start with settings that expose it. A CommandError, so that
    management commands (runserver, the daemons, runall) print the message and exit 1
    without a traceback; an ImproperlyConfigured for the WSGI loader (gunicorn logs it and
    stops with "Worker failed to boot")."""


def insecure_settings(settings, web: bool) -> list[str]:
    """What is unsafe to serve with: a list of sentences, empty when all is well.

    ``settings``: django.conf.settings (or any object with DEBUG, SECRET_KEY and
    ALLOWED_HOSTS). ``web``: the process answers HTTP requests (ALLOWED_HOSTS matters).
    Nothing is refused while DEBUG is on: DEBUG is for a developer's own machine.
    """
    if settings.DEBUG:
        return []
    problems = []
    try:
        key = settings.SECRET_KEY
    except ImproperlyConfigured:  # Django's answer for an empty SECRET_KEY
        key = ""
    if not key or key.startswith(INSECURE_PREFIX):
        problems.append(
            "SECRET_KEY is not set (the development key is in use) and DEBUG is off. "
            "Sessions, CSRF tokens and password resets are signed with it: set a random key "
            "of your own, the same in every process and across restarts, e.g.\n"
            f'    export SECRET_KEY="$({GENERATE_KEY})"\n'
            "(or DEBUG=true, on your own machine only)")
    if web and not settings.ALLOWED_HOSTS:
        problems.append(
            "ALLOWED_HOSTS is empty and DEBUG is off, so every request would be refused "
            "(400). Set the host names clients use, comma-separated, e.g.\n"
            "    export ALLOWED_HOSTS=scheduler.example.com")
    return problems


def refuse_insecure_start(what: str, web: bool = False) -> None:
    """Raise InsecureStart naming ``what`` (e.g. "runworker") and every problem found by
    insecure_settings(); return quietly when there is none."""
    from django.conf import settings

    problems = insecure_settings(settings, web=web)
    if problems:
        raise InsecureStart(f"{what} refuses to start:\n" + "\n".join(
            f"- {problem}" for problem in problems) + "\nSee docs/security.md.")


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
