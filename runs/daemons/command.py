"""What the daemon management commands share: a readiness check that fails with a clear
message and a non-zero exit, signal handlers, and the serve loop."""

from django.core.management.base import BaseCommand, CommandError

from scheduler_core.exceptions import SchedulerError
from scheduler_core.startup import refuse_insecure_start


class DaemonCommand(BaseCommand):
    """Base of runscheduler, rundispatcher and runworker. Of Django's system checks only
    the scheduler's run at start (run_daemon, deployment ones included; an error stops
    the daemon): the full set imports every URL configuration and view (half a second of
    a daemon's start-up on a 2-core machine, BENCHMARKS.md) to check what no daemon
    serves. ``manage.py check`` runs them all; ``check_ready`` checks that the database
    and the broker answer."""

    requires_system_checks = []


def run_daemon(daemon, max_rounds: int | None = None) -> None:
    """Refuse to start on an error of the scheduler's system checks (InsecureStart, exit
    1: e.g. a weak SECRET_KEY with DEBUG off, a bad isolation setting; docs/security.md,
    "System checks"), check the database and broker are reachable
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
