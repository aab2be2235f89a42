"""``manage.py importcrontab``: one cron job per crontab line, all or nothing."""

import re
import textwrap
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs.models import Job, Schedule
from jobs.schedules import cron
from jobs.schedules.crontab_files import parse_file

pytestmark = pytest.mark.django_db
CRONTABS = Path(__file__).resolve().parent / "data" / "crontabs"  # README.md there: sources

USER_CRONTAB = """\
SHELL=/bin/sh
MAILTO=ops@example.com
# Nightly backup
#   of the shop database
30 2 * * * pg_dump shop > /backups/shop-$(date +\\%F).dump

CRON_TZ=Europe/Berlin
# Stand-up reminder
30 9 * * 1-5 notify --channel team "Stand-up in 5 minutes"
@daily /bin/cleanup
TZ=America/New_York
*/15 * * * * /bin/poll
"""


def write(tmp_path, text: str, name: str = "tab") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def run(path, *args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("importcrontab", str(path), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def table_rows(out: str) -> dict[str, list[str]]:
    """Table rows of the output keyed by crontab line number: [id, next runs (UTC)]."""
    rows = {}
    for line in out.splitlines():
        match = re.match(r"^(\d+)\s+(\d+|-)\s+.*?(\d{4}-\d\d-\d\d \d\d:\d\d(?:, \d{4}-\d\d-\d\d "
                         r"\d\d:\d\d){2})$", line)
        if match:
            rows[match.group(1)] = [match.group(2), match.group(3)]
    return rows


def test_one_cron_job_per_line_named_by_its_comment_in_the_zone_set_above(tmp_path):
    path = write(tmp_path, USER_CRONTAB)

    out, err = run(path, "--handler", "echo")

    assert err == ""
    jobs = list(Job.objects.select_related("schedule").order_by("pk"))
    assert [(j.name, j.handler, j.payload, j.schedule.cron, j.schedule.timezone)
            for j in jobs] == [
        ("Nightly backup of the shop database", "echo",
         {"command": "pg_dump shop > /backups/shop-$(date +\\%F).dump"}, "30 2 * * *", "UTC"),
        ("Stand-up reminder", "echo",
         {"command": 'notify --channel team "Stand-up in 5 minutes"'}, "30 9 * * 1-5",
         "Europe/Berlin"),
        ("/bin/cleanup", "echo", {"command": "/bin/cleanup"}, "0 0 * * *", "Europe/Berlin"),
        ("/bin/poll", "echo", {"command": "/bin/poll"}, "*/15 * * * *", "America/New_York"),
    ]
    assert all(j.owner is None and j.schedule.misfire_policy == "run_once" for j in jobs)
    assert "Created 4 cron jobs with handler echo." in out


def test_the_table_shows_each_job_and_its_next_three_runs_in_utc(tmp_path):
    path = write(tmp_path, USER_CRONTAB)

    out, _ = run(path, "--handler", "echo")

    rows = table_rows(out)
    assert list(rows) == ["5", "9", "10", "12"]
    for job, (line, (pk, upcoming)) in zip(Job.objects.order_by("pk"), rows.items(),
                                           strict=True):
        assert pk == str(job.pk), line
        first = job.next_run_at
        expected = [first] + cron.occurrences(job.schedule.cron, job.schedule.timezone,
                                              first + timedelta(seconds=1),
                                              first + timedelta(days=800), limit=2)
        assert upcoming == ", ".join(f"{t:%Y-%m-%d %H:%M}" for t in expected), line
    berlin = rows["9"][1].split(", ")
    assert all(t.endswith(("07:30", "08:30")) for t in berlin)  # 09:30 CEST or CET in UTC


def test_system_crontab_puts_the_user_in_the_payload(tmp_path):
    path = write(tmp_path, """\
        17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly
        */5 * * * * www-data php /usr/share/cacti/site/poller.php
    """)

    run(path, "--handler", "echo")

    assert [j.payload for j in Job.objects.order_by("pk")] == [
        {"command": "cd / && run-parts --report /etc/cron.hourly", "user": "root"},
        {"command": "php /usr/share/cacti/site/poller.php", "user": "www-data"},
    ]


def test_format_overrides_the_guess(tmp_path):
    path = write(tmp_path, "0 * * * * aplay /home/me/intro.wav\n")

    run(path, "--handler", "echo", "--format", "system")

    assert Job.objects.get().payload == {"command": "/home/me/intro.wav", "user": "aplay"}


def test_dry_run_stores_nothing_and_says_what_it_would_create(tmp_path):
    path = write(tmp_path, USER_CRONTAB)

    out, err = run(path, "--handler", "echo", "--dry-run")

    assert not Job.objects.exists() and not Schedule.objects.exists()
    assert list(table_rows(out)) == ["5", "9", "10", "12"]
    assert all(pk == "-" for pk, _ in table_rows(out).values())
    assert "Would create 4 cron jobs (dry run: nothing stored)." in out and err == ""


BAD = """\
# good
0 * * * * /bin/ok
61 * * * * /bin/bad-minute
@reboot /bin/boot
CRON_TZ=Mars/Olympus
0 9 * * * /bin/on-mars
CRON_TZ=UTC
0 0 * * * * /bin/six-fields
0 12 * * * /bin/also-ok
"""


@pytest.mark.parametrize("dry_run", [False, True])
def test_any_bad_line_is_reported_with_its_number_and_nothing_is_created(tmp_path, dry_run):
    path = write(tmp_path, BAD)

    with pytest.raises(CommandError, match="5 bad lines .* nothing (would be )?created"):
        run(path, "--handler", "echo", *(["--dry-run"] if dry_run else []))

    assert not Job.objects.exists() and not Schedule.objects.exists()


def test_the_errors_name_file_line_and_reason(tmp_path):
    path = write(tmp_path, BAD)
    err = StringIO()

    with pytest.raises(CommandError):
        call_command("importcrontab", str(path), "--handler", "echo", stderr=err,
                     stdout=StringIO())

    lines = err.getvalue().splitlines()
    assert lines[0] == f"{path}:3: bad minute field '61': 61 is out of range 0-59"
    assert lines[1].startswith(f"{path}:4: @reboot has no meaning here")
    assert lines[2].startswith(f"{path}:5: unknown IANA timezone 'Mars/Olympus'")
    assert lines[3].startswith(f"{path}:6: unknown IANA timezone 'Mars/Olympus'")
    assert lines[4].startswith(f"{path}:8: command starts with '*'")
    assert len(lines) == 5


def test_skip_invalid_creates_the_good_lines_and_reports_the_bad(tmp_path):
    path = write(tmp_path, BAD)

    out, err = run(path, "--handler", "echo", "--skip-invalid")

    assert [j.payload["command"] for j in Job.objects.order_by("pk")] == [
        "/bin/ok", "/bin/also-ok"]
    assert Job.objects.get(payload__command="/bin/ok").name == "good"
    assert len(err.splitlines()) == 5
    assert "Created 2 cron jobs with handler echo; skipped 5 bad lines." in out


def test_owner_must_exist_and_owns_the_jobs(tmp_path):
    path = write(tmp_path, "0 * * * * /bin/ok\n")
    alice = get_user_model().objects.create_user("alice")

    with pytest.raises(CommandError, match="no user named 'bob'"):
        run(path, "--handler", "echo", "--owner", "bob")
    out, _ = run(path, "--handler", "echo", "--owner", "alice")

    assert Job.objects.get().owner == alice
    assert "owned by alice" in out


def test_unknown_handler_and_missing_file_are_command_errors(tmp_path):
    path = write(tmp_path, "0 * * * * /bin/ok\n")

    with pytest.raises(CommandError, match=r"no handler registered as 'nope' \(registered: "):
        run(path, "--handler", "nope")
    with pytest.raises(CommandError, match="no such crontab file"):
        run(tmp_path / "absent", "--handler", "echo")
    assert not Job.objects.exists()


def test_the_internal_django_task_handler_is_neither_listed_nor_taken(tmp_path):
    """Its payload names a task, not a crontab line's command: every run would fail."""
    path = write(tmp_path, "0 * * * * /bin/ok\n")

    with pytest.raises(CommandError) as caught:
        run(path, "--handler", "django_task")
    assert "no handler registered as 'django_task'" in str(caught.value)
    assert "django_task," not in str(caught.value) and "echo" in str(caught.value)
    with pytest.raises(CommandError) as caught:
        run(path, "--handler", "nope")
    assert "django_task" not in str(caught.value)
    assert not Job.objects.exists()


def test_a_file_without_schedule_lines_creates_nothing_quietly(tmp_path):
    path = write(tmp_path, "# only a comment\nMAILTO=x\n\n")

    out, err = run(path, "--handler", "echo")

    assert "No valid schedule lines" in out and err == "" and not Job.objects.exists()


def test_next_run_of_an_imported_berlin_job_skips_nothing_across_dst(tmp_path):
    path = write(tmp_path, "CRON_TZ=Europe/Berlin\n30 2 * * * /bin/nightly\n")
    run(path, "--handler", "echo")
    schedule = Job.objects.get().schedule

    day = cron.occurrences(schedule.cron, schedule.timezone,
                           datetime(2025, 10, 26, tzinfo=UTC), datetime(2025, 10, 27, tzinfo=UTC))

    assert day == [datetime(2025, 10, 26, 0, 30, tzinfo=UTC)]


def test_every_corpus_crontab_imports_with_skip_invalid_one_job_per_good_line(tmp_path):
    total = 0
    for path in sorted(CRONTABS.glob("*.crontab")):
        parsed = parse_file(path)
        _, err = run(path, "--handler", "echo", "--skip-invalid")
        assert [line.split(": ")[0] for line in err.splitlines()] == [
            f"{path}:{e.line_number}" for e in parsed.errors]
        total += len(parsed.entries)
        assert Job.objects.count() == total, path.name
