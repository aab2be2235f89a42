from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError

from runs.history import retention
from runs.history import time_partitions as history_partitions
from scheduler_core import conf
from scheduler_core.progress import progress


class Command(BaseCommand):
    help = ("Delete runs that succeeded or were cancelled more than --older-than seconds "
            "ago (default HISTORY_RETENTION_S), with their attempts and log lines, and the "
            "one-off jobs left with no run (runs/history/retention.py): on PostgreSQL the time "
            "partitions wholly past that age are dropped first. The dispatcher does this "
            "on its own; this is for doing it at once, or with another age.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, default=None, metavar="SECONDS",
                            help="age past which finished runs go (default: "
                                 "HISTORY_RETENTION_S)")
        parser.add_argument("--batch", type=int, default=5000,
                            help="runs deleted per transaction, 1 to 10000 (default 5000)")
        parser.add_argument("--dry-run", action="store_true",
                            help="count the runs that would go; delete nothing")

    def handle(self, *args, older_than, batch, dry_run, **options):
        if not 1 <= batch <= 10_000:  # a batch's ids are bound one by one (SQLite: 32,766)
            raise CommandError("--batch must be between 1 and 10000")
        if older_than is None:
            age = conf.get("HISTORY_RETENTION_S")
            if not age > 0:
                raise CommandError("nothing to prune: the retention is 0 (keep for ever); "
                                   "pass --older-than SECONDS")
        else:
            age = older_than
            if not 0 < age < float("inf"):
                raise CommandError(f"--older-than must be a positive number of seconds, "
                                   f"not {older_than}")
        before = retention.cutoff(age)
        if before is None:
            self.stdout.write(f"Nothing is older than {age:g} s: nothing to prune.")
            return
        if dry_run:
            count = retention.prunable(before).count()
            self.stdout.write(f"{count} runs finished before {before:%Y-%m-%d %H:%M:%S} UTC "
                              f"would be deleted (dry run)")
            return
        # On PostgreSQL, whole time partitions past the age go first (docs/retention.md,
        # "Partitioned history"); what is left past it goes row by row.
        try:
            total = retention.drop_partitions(before)
        except OperationalError as exc:
            # lock_not_available: the detach waits only LOCK_TIMEOUT for the tables, so as
            # not to stall every ack behind its queued lock (docs/retention.md).
            if getattr(exc.__cause__, "sqlstate", None) != "55P03":
                raise
            raise CommandError(
                "the runs, attempts and log tables stayed locked for more than "
                f"{history_partitions.LOCK_TIMEOUT} (a long transaction holds them), so no "
                "partition was dropped and nothing was deleted; run prunehistory again "
                "later, or leave it to the dispatchers, which retry every minute") from exc
        # No total: counting what would go costs as much as a dry run.
        with progress(self.stdout, "pruning runs") as advance:
            while True:
                pruned = retention.prune(before, batch)
                total.add(pruned)
                advance(pruned.runs)
                if pruned.runs < batch:
                    break
        keys = 0
        while (gone := retention.prune_idempotency_keys(batch)) > 0:
            keys += gone
            if gone < batch:
                break
        self.stdout.write(f"Deleted {total.runs} runs finished before "
                          f"{before:%Y-%m-%d %H:%M:%S} UTC, {total.attempts} attempts, "
                          f"{total.log_lines} log lines and {total.jobs} one-off jobs, "
                          f"and {keys} Idempotency-Key responses past IDEMPOTENCY_TTL_S.")
