from django.core.management.base import BaseCommand, CommandError

from jobs.validation import QUEUE_RE
from runs.daemon_command import run_daemon
from runs.worker import Worker


class Command(BaseCommand):
    help = "Lease runs from the broker and execute them (see runs/worker.py)."

    def add_arguments(self, parser):
        parser.add_argument("--queues", default="default",
                            help="comma-separated queues to serve, in priority order")
        parser.add_argument("--concurrency", type=int, default=2,
                            help="child processes executing runs (default 2)")
        parser.add_argument("--max-runs", type=int, default=None,
                            help="exit after this many finished runs")
        parser.add_argument("--burst", action="store_true",
                            help="exit once nothing is ready and nothing is running")
        parser.add_argument("--grace", type=float, default=None,
                            help="seconds to let in-flight runs finish after SIGTERM")

    def handle(self, *args, queues, concurrency, max_runs, burst, grace, **options):
        names = [q.strip() for q in queues.split(",") if q.strip()]
        bad = [q for q in names if not QUEUE_RE.match(q)]
        if not names or bad:
            raise CommandError(f"--queues: invalid queue name(s) {bad or [queues]}")
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        worker = Worker(names, concurrency, max_runs=max_runs, burst=burst, grace_s=grace)
        run_daemon(worker)
