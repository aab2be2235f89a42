"""``manage.py importcrontab FILE --handler NAME [--owner USER] [--dry-run] [--skip-invalid]
[--format auto|user|system]``: one cron job per schedule line of a crontab file.

Each schedule line (crontab(5), user or system format, parsed by
jobs/schedules/crontab_files.py) becomes a cron job of handler NAME: the command (and, in a
system crontab, the user) in the payload, the ``#`` comment right above as the name
(else the command), the timezone of the last CRON_TZ=/TZ= line above it. Every line is
validated first; if any is bad, each is reported with its line number and nothing is
created (exit status 1) unless --skip-invalid. The jobs are created in one transaction
(jobs.services.create_jobs). A table lists what was created (or, with --dry-run, would
be) with each job's next three runs in UTC. docs/cron.md.
"""

from datetime import datetime, timedelta
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from jobs.schedules import cron, crontab_files
from jobs.services import InvalidJobs, create_jobs
from jobs.validation import validate_job
from scheduler_core.exceptions import InvalidJob
from scheduler_core.progress import progress
from scheduler_core.registry import creatable_handler_names, get_handler
from scheduler_core.text import one_line

NAME_WIDTH = 40
# next_run_at is itself the first run, so the table lists from just before it.
JUST_BEFORE = timedelta(microseconds=1)


def job_spec(entry: crontab_files.CronEntry, handler: str) -> dict:
    """The create_jobs spec of one crontab line: name from its comment (else its command,
    cut to 200 characters, a tab or other control character as a space), payload
    ``{"command": ...}`` plus ``"user"`` if it has one."""
    payload = {"command": entry.command}
    if entry.user is not None:
        payload["user"] = entry.user
    return {"name": one_line(entry.comment or entry.command, 200), "handler": handler,
            "payload": payload, "cron": entry.schedule, "timezone": entry.timezone}


def next_three(expression: str, tz: str, after: datetime) -> str:
    """The next three occurrences strictly after ``after``, as "YYYY-MM-DD HH:MM" in UTC."""
    found = []
    for moment in cron.iter_after(expression, tz, after):
        found.append(f"{moment:%Y-%m-%d %H:%M}")
        if len(found) == 3:
            break
    return ", ".join(found)


class Command(BaseCommand):
    step = staticmethod(lambda n=1: None)  # the progress bar's advance, while importing
    help = ("Create one cron job of handler NAME per schedule line of a crontab file; "
            "nothing is created if any line is bad, unless --skip-invalid.")

    def add_arguments(self, parser):
        parser.add_argument("file", metavar="FILE", help="the crontab file to import")
        parser.add_argument("--handler", required=True, metavar="NAME",
                            help="registered handler every job runs (payload: the command)")
        parser.add_argument("--owner", metavar="USER", help="existing username to own the jobs")
        parser.add_argument("--dry-run", action="store_true",
                            help="validate and show what would be created; store nothing")
        parser.add_argument("--skip-invalid", action="store_true",
                            help="create the good lines even if some lines are bad")
        parser.add_argument("--format", dest="crontab_format", default="auto",
                            choices=("auto", "user", "system"),
                            help="user crontab, system crontab (a user column after the "
                                 "schedule), or auto: guess (the default)")

    def handle(self, *args, file, handler, owner, dry_run, skip_invalid, crontab_format,
               **options):
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{path}: no such crontab file")
        names = creatable_handler_names()
        try:
            get_handler(handler)
            if handler not in names:
                # An internal handler (django_task) takes a payload of its own, not a
                # crontab line's command: every run would fail.
                raise InvalidJob({"handler": "internal"})
        except InvalidJob:
            raise CommandError(f"--handler: no handler registered as {handler!r} "
                               f"(registered: {', '.join(names)})") from None
        user = self.owner(owner)
        parsed = crontab_files.parse_file(
            path, system={"auto": None, "user": False, "system": True}[crontab_format])
        # Three passes over the lines: validate, create, the table's next runs.
        with progress(self.stdout, f"importing {path.name}", 3 * len(parsed.entries)) as step:
            self.step = step
            self.import_lines(path, parsed, handler, user, dry_run, skip_invalid)

    def import_lines(self, path, parsed, handler, user, dry_run, skip_invalid) -> None:
        entries, errors = self.validate(parsed, handler)
        for line_number, reason in errors:
            self.stderr.write(f"{path}:{line_number}: {reason}")
        if errors and not skip_invalid:
            raise CommandError(
                f"{len(errors)} bad line{'s' if len(errors) != 1 else ''} in {path}; nothing "
                f"{'would be ' if dry_run else ''}created (fix them, or pass --skip-invalid "
                f"to import the good lines only)")
        if not entries:
            self.stdout.write(f"No valid schedule lines in {path}; nothing to create.")
            return
        specs = [job_spec(e, handler) for e in entries]
        if dry_run:
            now = timezone.now()
            rows = [(e, None, next_three(e.schedule, e.timezone, now)) for e in entries]
        else:
            try:
                jobs = create_jobs(specs, owner=user)
            except InvalidJobs as exc:  # validated above; only a concurrent change gets here
                raise CommandError(f"nothing created: {exc.errors}") from exc
            self.step(len(entries))
            rows = []
            for e, job in zip(entries, jobs, strict=True):
                rows.append((e, job.pk, next_three(job.schedule.cron, job.schedule.timezone,
                                                   job.next_run_at - JUST_BEFORE)))
                self.step(1)
        self.table(rows)
        skipped = f"; skipped {len(errors)} bad lines" if errors else ""
        owned = f" owned by {user.get_username()}" if user else ""
        if dry_run:
            self.stdout.write(f"Would create {len(rows)} cron jobs{owned} (dry run: nothing "
                              f"stored){skipped}.")
        else:
            self.stdout.write(f"Created {len(rows)} cron jobs{owned} with handler "
                              f"{handler}{skipped}.")

    def owner(self, username: str | None):
        if not username:
            return None
        User = get_user_model()
        try:
            return User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"--owner: no user named {username!r}") from None

    def validate(self, parsed: crontab_files.Crontab, handler: str):
        """The entries that pass jobs.validation as well as the parser, and
        ``(line number, reason)`` for every bad line, in line order."""
        errors = [(e.line_number, e.reason) for e in parsed.errors]
        good = []
        for entry in parsed.entries:
            try:
                validate_job(job_spec(entry, handler))
                good.append(entry)
            except InvalidJob as exc:
                errors.append((entry.line_number,
                               "; ".join(f"{k}: {v}" for k, v in exc.errors.items())))
            self.step(1)
        return good, sorted(errors)

    def table(self, rows) -> None:
        lines = [("line", "id", "name", "schedule", "timezone", "next runs (UTC)")]
        for entry, pk, upcoming in rows:
            name = (entry.comment or entry.command)
            if len(name) > NAME_WIDTH:
                name = name[:NAME_WIDTH - 1] + "…"
            lines.append((str(entry.line_number), "-" if pk is None else str(pk), name,
                          entry.schedule, entry.timezone, upcoming))
        widths = [max(len(line[i]) for line in lines) for i in range(6)]
        for line in lines:
            cells = (cell.ljust(w) for cell, w in zip(line, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())

