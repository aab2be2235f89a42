
from jobs.schedules.scheduler import Scheduler
from runs.daemons.command import DaemonCommand, run_daemon


class Command(DaemonCommand):
    help = "Materialise due cron occurrences as runs (jobs/schedules/scheduler.py)."

    def add_arguments(self, parser):
        parser.add_argument("--max-ticks", type=int, default=None,
                            help="exit after this many ticks (tests)")

    def handle(self, *args, max_ticks, **options):
        run_daemon(Scheduler(), max_rounds=max_ticks)
