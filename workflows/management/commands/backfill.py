"""``manage.py backfill --job ID | --workflow ID --start … --end …``: make the runs of a
cron job's (or a cron workflow's) past occurrences in a range, with a progress bar
(docs/cron.md, "Backfill"; the rules are jobs/schedules/backfill.py's). It lives in workflows/
because only this app may import both the jobs' and the workflows' backfill."""

from contextlib import ExitStack

from django.core.management.base import BaseCommand, CommandError

from jobs.models import Job
from jobs.schedules.backfill import backfill_job
from scheduler_core.exceptions import InvalidJob, SchedulerError
from scheduler_core.progress import progress
from workflows.backfill import backfill_workflow
from workflows.models import Workflow


class Command(BaseCommand):
    help = ("Make a run for each past occurrence of a cron job (or cron workflow) in "
            "[--start, --end) that has none; idempotent, at most "
            "BACKFILL_MAX_OCCURRENCES occurrences.")

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--job", type=int, help="the cron job's id")
        target.add_argument("--workflow", type=int, help="the cron workflow's id")
        parser.add_argument("--start", required=True,
                            help="first moment, inclusive: ISO 8601 date-time or date; "
                                 "without an offset, in the schedule's timezone")
        parser.add_argument("--end", required=True, help="last moment, exclusive; as --start")
        parser.add_argument("--database", default="default", help="database alias")

    def handle(self, *args, job, workflow, start, end, database, **options):
        with ExitStack() as stack:
            bar = {}

            def planned(record):
                what = f"job {job}" if job is not None else f"workflow {workflow}"
                bar["advance"] = stack.enter_context(
                    progress(self.stdout, f"backfilling {what}", record.total))

            def advance(count):
                bar["advance"](count)

            try:
                if job is not None:
                    record = backfill_job(job, start, end, using=database,
                                          on_planned=planned, on_progress=advance)
                else:
                    record = backfill_workflow(workflow, start, end, using=database,
                                               on_planned=planned, on_progress=advance)
            except (Job.DoesNotExist, Workflow.DoesNotExist) as exc:
                raise CommandError(f"no {'job' if job is not None else 'workflow'} "
                                   f"{job if job is not None else workflow}") from exc
            except InvalidJob as exc:
                raise CommandError("; ".join(f"--{field}: {why}"
                                             for field, why in exc.errors.items())) from exc
            except SchedulerError as exc:
                raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Backfill {record.pk}: {record.total} occurrences from "
            f"{record.start.isoformat()} to {record.end.isoformat()} (end exclusive); "
            f"{record.made} runs made, {record.skipped} skipped (they had one already).")
