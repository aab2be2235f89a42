from django.core.management.base import CommandError

from runs.daemons.command import DaemonCommand, run_daemon
from runs.tenancy.policy import parse_queue_weights
from runs.worker import Worker
from runs.worker.main import DEFAULT_CONCURRENCY, default_concurrency


class Command(DaemonCommand):
    help = "Lease runs from the broker and execute them (see runs/worker/)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--queues", default="default",
            help='comma-separated queues to serve, in priority order ("default,reports"), '
                 'or with weights sharing lease capacity ("default:3,reports:1")')
        parser.add_argument(
            "--concurrency", type=int, default=None,
            help="child processes executing runs (default: the environment's "
                 f"WORKER_CONCURRENCY, else {DEFAULT_CONCURRENCY}, as in the Procfile)")
        parser.add_argument("--max-runs", type=int, default=None,
                            help="exit after this many finished runs")
        parser.add_argument("--burst", action="store_true",
                            help="exit once nothing is ready and nothing is running")
        parser.add_argument("--grace", type=float, default=None,
                            help="seconds to let in-flight runs finish after SIGTERM")
        parser.add_argument(
            "--max-runs-per-child", type=int, default=None,
            help="replace a child process after it has executed this many runs, once "
                 "its run in flight ends (default: SCHEDULER MAX_RUNS_PER_CHILD; 0: never)")
        parser.add_argument(
            "--max-memory-per-child", type=int, default=None, metavar="MIB",
            help="replace a child process once its resident memory reaches this many "
                 "MiB, after its run in flight ends (default: SCHEDULER "
                 "MAX_MEMORY_PER_CHILD_MB; 0: never)")

    def handle(self, *args, queues, concurrency, max_runs, burst, grace, max_runs_per_child,
               max_memory_per_child, **options):
        try:
            weights = parse_queue_weights(queues)
        except ValueError as exc:
            raise CommandError(f"--queues: {exc}") from exc
        if concurrency is None:
            try:
                concurrency = default_concurrency()
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        weighted = ":" in queues
        for option, value in (("--max-runs-per-child", max_runs_per_child),
                              ("--max-memory-per-child", max_memory_per_child)):
            if value is not None and value < 0:
                raise CommandError(f"{option} must be 0 (never) or more, not {value}")
        try:
            worker = Worker(list(weights), concurrency, max_runs=max_runs, burst=burst,
                            grace_s=grace, weights=weights if weighted else None,
                            max_runs_per_child=max_runs_per_child,
                            max_memory_per_child_mb=max_memory_per_child)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        run_daemon(worker)
