"""What the daemon management commands share: a readiness check that fails with a clear
message and a non-zero exit, signal handlers, and the serve loop."""

from django.core.management.base import CommandError

from jobs.exceptions import SchedulerError


def run_daemon(daemon, max_rounds: int | None = None) -> None:
    """Check the database and broker are reachable (CommandError, exit 1, if not), install
    SIGTERM/SIGINT handlers and serve until stopped."""
    try:
        daemon.check_ready()
    except SchedulerError as exc:
        raise CommandError(f"{daemon.name} cannot start: {exc}") from exc
    daemon.install_signals()
    daemon.serve(max_rounds=max_rounds)
