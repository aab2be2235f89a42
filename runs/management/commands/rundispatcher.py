
from runs.daemons.command import DaemonCommand, run_daemon
from runs.daemons.dispatcher import Dispatcher


class Command(DaemonCommand):
    help = ("Promote due runs, reap expired leases, reconcile DB and broker "
            "(runs/daemons/dispatcher.py).")

    def add_arguments(self, parser):
        parser.add_argument("--max-rounds", type=int, default=None,
                            help="exit after this many rounds (tests)")

    def handle(self, *args, max_rounds, **options):
        run_daemon(Dispatcher(), max_rounds=max_rounds)
