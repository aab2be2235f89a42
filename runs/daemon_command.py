"""What the daemon management commands share: a readiness check that fails with a clear
message and a non-zero exit, signal handlers, and the serve loop."""

from django.core.management.base import BaseCommand, CommandError

from scheduler_core.exceptions import SchedulerError
from scheduler_core.startup import refuse_insecure_start


class DaemonCommand(BaseCommand):
    """Base of runscheduler, rundispatcher and runworker. Django's system checks are not
    run at start: they import every URL configuration and view (half a second of a
    daemon's start-up on a 2-core machine, BENCHMARKS.md) to check what no daemon serves.
    ``manage.py check`` and ``migrate`` run them at deploy time, and ``check_ready``
    checks what a daemon needs: its settings, the database and the broker."""

    requires_system_checks = []


def run_daemon(daemon, max_rounds: int | None = None) -> None:
    """Refuse insecure settings (InsecureStart, exit 1: the development SECRET_KEY with
    DEBUG off, docs/security.md), check the database and broker are reachable
    (CommandError, exit 1, if not), install SIGTERM/SIGINT handlers and serve until
    stopped. A SchedulerError out of serve (a start-up step failed after its children
    or threads were made, which serve stops first) is a CommandError too."""
    refuse_insecure_start(daemon.name)
    try:
        daemon.check_ready()
    except SchedulerError as exc:
        raise CommandError(f"{daemon.name} cannot start: {exc}") from exc
    daemon.install_signals()
    try:
        daemon.serve(max_rounds=max_rounds)
    except SchedulerError as exc:  # a start-up step of serve (the worker's registration)
        raise CommandError(f"{daemon.name} cannot start: {exc}") from exc
