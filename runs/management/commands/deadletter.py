"""``manage.py deadletter {list,requeue,discard}``: the dead letter by filter, from the
command line (runs/api/dead_letter.py; docs/api.md, "Dead letter")."""

from django.core.management.base import BaseCommand, CommandError

from runs.api import dead_letter
from scheduler_core.progress import progress


class Command(BaseCommand):
    help = ("Count, requeue (with a fresh attempt budget) or discard the dead runs a "
            "filter picks; the rules are the admin's actions' (runs/services.py).")

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["count", "requeue", "discard"])
        parser.add_argument("--queue", help="only runs of this queue")
        parser.add_argument("--job", type=int, help="only runs of this job id")
        parser.add_argument("--handler", help="only runs whose job runs this handler")
        parser.add_argument("--owner", help="only runs of jobs this username owns")
        parser.add_argument("--older-than", type=float, metavar="SECONDS",
                            help="only runs dead for more than this many seconds")
        parser.add_argument("--dry-run", action="store_true",
                            help="say how many runs would be changed; change nothing")

    def handle(self, *args, action, queue, job, handler, owner, older_than, dry_run,
               **options):
        if older_than is not None and not 0 <= older_than <= 1e9:
            raise CommandError(f"--older-than must be 0 to 1e9 seconds, not {older_than}")
        for option, value in (("--queue", queue), ("--handler", handler), ("--owner", owner)):
            # PostgreSQL text cannot hold NUL: the query would fail with a DataError.
            if value is not None and "\x00" in value:
                raise CommandError(f"{option} must not contain a NUL character")
        chosen = dead_letter.DeadFilter(queue=queue, job=job, handler=handler, owner=owner,
                                        older_than_s=older_than)
        runs = chosen.select()
        if action == "count" or dry_run:
            count = runs.count()
            would = ("" if action == "count"
                     else f"; they would be {dead_letter.DONE[action]} (dry run)")
            self.stdout.write(f"{count} dead runs match{would}.")
            return
        total = runs.count()
        with progress(self.stdout, f"{action} dead runs", total) as advance:
            matched, changed = dead_letter.apply(action, runs, advance=advance)
        skipped = matched - changed
        note = ""
        if skipped:
            note = (f"; {skipped} left alone (no longer dead, their job is not active: "
                    "resume it first, or their owner's pending-runs quota max_pending is "
                    "reached)")
        self.stdout.write(f"{changed} of {matched} dead runs {dead_letter.DONE[action]}{note}.")
