"""``manage.py loaddemo [CRONTAB ...] [--owner USER]``: load crontab files as cron jobs.

With no file it loads the project's demo crontab (jobs/demo.crontab) plus four one-off
jobs that show a success, a slow run, retries with backoff and the dead letter, due
``--start-in`` seconds later (START_IN_S, when the daemons started next are up); if the
demo is already loaded it only lists it again (``--again`` loads a second copy). Without
--owner the jobs belong to the superuser ``demo`` (password ``demo``), created if missing.
Bad crontab lines (and @reboot) are reported on stderr and skipped, never fatal.
"""

from datetime import UTC
from pathlib import Path

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from jobs.models import Job
from jobs.schedules import cron, crontab_files
from jobs.services import InvalidJobs, create_job, create_jobs
from runs.clock import db_now
from runs.models import PENDING_STATES, Run, RunState
from scheduler_core import conf
from scheduler_core.progress import progress
from scheduler_core.rest.tokens import create_token
from scheduler_core.text import one_line

DEMO_CRONTAB = Path(__file__).resolve().parents[2] / "demo.crontab"
ENDED = {RunState.SUCCEEDED: "succeeded", RunState.DEAD: "died (dead letter)",
         RunState.CANCELLED: "was cancelled"}  # how a one-off job's run ended, in words
# scripts/demo starts the daemons right after loading; on a 2-core machine they lease
# their first run 10-15 s later. One-off jobs due at load time would start with that much
# lag, the first thing the dashboard shows; due after it, they start on time.
START_IN_S = 20.0
ONE_OFF = [  # (handler, payload, name, max_attempts)
    ("noop", {}, "demo: noop (succeeds at once)", None),
    ("sleep", {"seconds": 3}, "demo: sleep 3 s", None),
    ("flaky", {"fail_first": 3}, "demo: flaky (fails 3 times, retried after 1, 2, 4 s)", 5),
    ("always_fails", {}, "demo: always fails (ends in the dead letter)", 3),
]


def job_spec(entry: crontab_files.CronEntry, source: str) -> dict:
    """The ``create_jobs`` spec of one crontab entry; ``source`` is "<file>:<line>"."""
    return {
        "name": one_line(entry.comment or entry.command, 200), "handler": "echo",
        "payload": {"command": entry.command, "source": source},
        "cron": entry.schedule, "timezone": entry.timezone, "queue": "default",
        "priority": 5, "timeout_s": 60, "max_attempts": 4, "misfire_policy": "run_once",
    }


def utc_text(moment) -> str:
    """An aware datetime as ``2026-01-31 14:05:09`` in UTC (the demo table's zone)."""
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def node_workflows(job_ids: list[int]) -> dict[int, int]:
    """job id -> workflow id, for those of ``job_ids`` that are a workflow's node; empty
    when the optional workflows app is not installed (docs/workflows.md)."""
    if not apps.is_installed("workflows"):
        return {}
    node = apps.get_model("workflows", "WorkflowNode")
    return dict(node.objects.filter(job_id__in=job_ids).values_list("job_id", "workflow_id"))


class Command(BaseCommand):
    help = ("Create one cron job (handler echo) per valid line of the given crontab files "
            "(default: the demo crontab, plus demo one-off jobs) and print the API token.")

    def add_arguments(self, parser):
        parser.add_argument("crontabs", nargs="*", metavar="CRONTAB",
                            help="crontab files (default: jobs/demo.crontab)")
        parser.add_argument("--owner", help="existing username to own the jobs "
                            "(default: the demo superuser demo/demo, created if missing)")
        parser.add_argument("--format", dest="crontab_format", default="auto",
                            choices=("auto", "user", "system"),
                            help="crontab format: user, system (with a user column) or "
                                 "auto (guess per file, the default)")
        parser.add_argument("--again", action="store_true",
                            help="load the demo even if it is already loaded")
        parser.add_argument("--base-url", default="http://127.0.0.1:8000",
                            help="where the web server listens, for the printed examples")
        parser.add_argument("--start-in", type=float, default=START_IN_S, metavar="SECONDS",
                            help="the demo's one-off jobs are due this many seconds after "
                                 "loading, when the daemons started next are up (default "
                                 f"{START_IN_S:g}); 0: at once")

    def handle(self, *args, crontabs, owner, crontab_format, again, base_url, start_in,
               **options):
        if not conf.get("DEMO_HANDLERS"):
            raise CommandError(
                "the demo jobs run the demo handlers (echo, noop, sleep, flaky, always_fails), "
                "which are off: set SCHEDULER_DEMO_HANDLERS=true for this command and the "
                "workers (scripts/demo does)")
        user = self.owner(owner)
        # A new token each time: the last one is stored hashed and cannot be shown again
        # (earlier ones keep working).
        token = create_token(user)
        api = f"{base_url.rstrip('/')}/api/jobs/"
        if not crontabs and not again:
            loaded = list(Job.objects.filter(owner=user, name__startswith="demo: ")
                          .select_related("schedule"))
            if loaded:
                demo = list(Job.objects.filter(owner=user).select_related("schedule")
                            .order_by("pk"))
                self.table(demo)
                # "manage.py" bare: the python that runs it is the checkout's .venv in the
                # demo, another in a project of one's own (a bare python3 may be too old).
                self.stdout.write(f"The demo is already loaded (its user has {len(demo)} jobs); "
                                  "`manage.py loaddemo --again` loads another copy.")
                self.instructions(user, token, api, demo)
                return
        paths = [Path(p) for p in crontabs] or [DEMO_CRONTAB]
        for path in paths:
            if not path.is_file():
                raise CommandError(f"{path}: no such crontab file")
        system = {"auto": None, "user": False, "system": True}[crontab_format]
        specs, skipped = [], 0
        # Steps: each file read, then the jobs created.
        with progress(self.stdout, "loading the demo", len(paths) + 1) as step:
            for path in paths:
                label = "jobs/demo.crontab" if path == DEMO_CRONTAB else str(path)
                parsed = crontab_files.parse_file(path, system=system)
                for error in parsed.errors:
                    self.stderr.write(f"{label}:{error.line_number}: skipped: {error.reason}")
                skipped += len(parsed.errors)
                specs += [job_spec(e, f"{label}:{e.line_number}") for e in parsed.entries]
                step(1)
            jobs = self.create(specs, user)
            step(1)
        cron_count = len(jobs)
        if not crontabs:
            jobs += [create_job(handler, payload, owner=user, delay_s=start_in, name=name,
                                **({"max_attempts": attempts} if attempts else {}))
                     for handler, payload, name, attempts in ONE_OFF]
        self.table(jobs)
        self.stdout.write(f"Created {len(jobs)} jobs ({cron_count} cron, "
                          f"{len(jobs) - cron_count} one-off) owned by {user.get_username()}; "
                          f"skipped {skipped} crontab lines.")
        self.instructions(user, token, api, jobs)

    def instructions(self, user, token: str, api: str, jobs) -> None:
        self.stdout.write(f"API token for {user.get_username()}: {token}")
        self.stdout.write(f'  curl -H "Authorization: Token {token}" {api}')
        # Worded for a demo loaded earlier too: its one-off jobs have long finished, and
        # their runs' history is what there is to see.
        for handler, what in (("echo", "A cron job's runs, one a minute"),
                              ("flaky", "The flaky job's attempts, retried after 1, 2 and 4 s"),
                              ("always_fails", "A run that ends in the dead letter")):
            job = next((j for j in jobs if j.handler == handler), None)
            if job is not None:
                self.stdout.write(f"{what}:")
                self.stdout.write(f'  curl -H "Authorization: Token {token}" '
                                  f"{api}{job.pk}/runs/")

    def owner(self, username: str | None):
        User = get_user_model()
        if username:
            try:
                return User.objects.get(**{User.USERNAME_FIELD: username})
            except User.DoesNotExist:
                raise CommandError(f"--owner: no user named {username!r}") from None
        user = User.objects.filter(**{User.USERNAME_FIELD: "demo"}).first()
        if user is None:
            user = User.objects.create_superuser("demo", email="demo@example.com", password="demo")
            self.stdout.write("Created superuser demo (password demo).")
        elif not (user.is_staff and user.is_superuser):
            user.is_staff = user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
        return user

    def create(self, specs: list[dict], user) -> list:
        """create_jobs, all or nothing; items it still refuses are reported and dropped."""
        if not specs:
            return []
        try:
            return create_jobs(specs, owner=user)
        except InvalidJobs as exc:
            for i, errors in sorted(exc.item_errors.items()):
                reasons = "; ".join(f"{k}: {v}" for k, v in errors.items())
                self.stderr.write(f"{specs[i]['payload']['source']}: skipped: {reasons}")
            keep = [s for i, s in enumerate(specs) if i not in exc.item_errors]
            return create_jobs(keep, owner=user) if keep else []

    def table(self, jobs) -> None:
        """Print the jobs, each with its next run as things stand now: a paused or
        cancelled job says so, a cron job whose stored next run passed while the scheduler
        was down shows its next occurrence after now, and a one-off job whose run has
        ended shows how it ended (listing a demo loaded earlier, as scripts/demo does on
        every start)."""
        rows = [("id", "name", "schedule / run_at", "next run (UTC)")]
        now = db_now()
        latest = {}  # one-off job id -> (state, run_at) of its latest run
        for job_id, state, run_at in (Run.objects.filter(
                job__in=[j.pk for j in jobs if j.schedule is None])
                .order_by("job_id", "-pk").values_list("job_id", "state", "run_at")):
            latest.setdefault(job_id, (state, run_at))
        nodes = node_workflows([j.pk for j in jobs])
        for job in jobs:
            if job.pk in nodes:
                # A node's job runs when its workflow reaches the node; its stored next
                # run is not when that is.
                when, upcoming = "-", f"node of workflow {nodes[job.pk]}"
            elif job.schedule is not None:
                when = f"{job.schedule.cron} ({job.schedule.timezone})"
                upcoming = job.next_run_at
                if upcoming is not None and upcoming < now:
                    # Stored while the scheduler was down: it goes on from the next
                    # occurrence (after a catch-up run, as the misfire policy says).
                    upcoming = cron.next_after(job.schedule.cron, job.schedule.timezone, now)
            else:
                when = f"once at {utc_text(job.run_at)} (UTC)"
                state, upcoming = latest.get(job.pk, (None, job.run_at))
                if state == RunState.RUNNING:
                    upcoming = "running now"
                elif state is not None and state not in PENDING_STATES:
                    upcoming = f"none: its run {ENDED[state]}"
            if job.status != Job.Status.ACTIVE:
                upcoming = f"none: {job.status}"
            if not isinstance(upcoming, str):
                upcoming = "-" if upcoming is None else utc_text(upcoming)
            name = job.name if len(job.name) <= 48 else job.name[:47] + "…"
            rows.append((str(job.pk), name, when, upcoming))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
