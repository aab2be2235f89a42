"""``manage.py loaddemo`` (jobs/management/commands/loaddemo.py) on PostgreSQL, and the
scheduler over every real-world crontab of the corpus in tests/data/crontabs/."""

from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from jobs import services
from jobs.management.commands.loaddemo import DEMO_CRONTAB, START_IN_S
from jobs.models import Job, Schedule
from jobs.schedules.cron import normalize
from jobs.schedules.crontab_files import parse_file
from jobs.schedules.scheduler import Scheduler
from runs.clock import db_now
from runs.models import Run
from scheduler_core import conf

CRONTABS = Path(__file__).resolve().parent / "data" / "crontabs"  # README.md there: sources
CORPUS = sorted(p.name for p in CRONTABS.glob("*.crontab"))
ONE_OFF = {"noop", "sleep", "flaky", "always_fails"}


def loaddemo(*args, **options) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("loaddemo", *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def printed_token(out: str, username: str) -> str:
    """The token loaddemo printed for ``username``."""
    (line,) = [line for line in out.splitlines()
               if line.startswith(f"API token for {username}: ")]
    return line.rsplit(" ", 1)[1]


def accepted(token: str) -> bool:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api.get("/api/jobs/").status_code == 200


@pytest.mark.django_db
def test_loaddemo_creates_the_demo_jobs_user_and_token():
    entries = parse_file(DEMO_CRONTAB).entries
    before = db_now()
    out, err = loaddemo()
    assert err == ""
    demo = get_user_model().objects.get(username="demo")
    assert demo.is_staff and demo.is_superuser and demo.check_password("demo")
    token = printed_token(out, "demo")

    cron_jobs = Job.objects.filter(owner=demo, schedule__isnull=False).select_related("schedule")
    assert sorted(j.payload["source"] for j in cron_jobs) == sorted(
        f"jobs/demo.crontab:{e.line_number}" for e in entries)
    by_line = {int(j.payload["source"].rsplit(":", 1)[1]): j for j in cron_jobs}
    for entry in entries:
        job = by_line[entry.line_number]
        assert (job.handler, job.queue, job.priority, job.timeout_s, job.max_attempts) == (
            "echo", "default", 5, 60, 4)
        assert job.payload["command"] == entry.command
        assert job.name == (entry.comment or entry.command)[:200]
        assert job.schedule.cron == normalize(entry.schedule)
        assert job.schedule.timezone == entry.timezone
        assert job.schedule.misfire_policy == "run_once"
        assert job.next_run_at > before
    assert sum(j.schedule.cron == "* * * * *" for j in cron_jobs) >= 3
    assert {j.schedule.timezone for j in cron_jobs} == {"UTC", "Europe/Berlin"}

    one_off = {j.handler: j for j in Job.objects.filter(owner=demo, schedule__isnull=True)}
    assert set(one_off) == ONE_OFF
    assert one_off["sleep"].payload == {"seconds": 3}
    assert one_off["flaky"].payload == {"fail_first": 3}
    assert one_off["flaky"].max_attempts == 5
    assert one_off["always_fails"].max_attempts == 3
    # Due when the daemons scripts/demo starts next are up, not at load time (a lag spike).
    for job in one_off.values():
        (run,) = Run.objects.filter(job=job)
        assert run.state == "scheduled"
        assert before + timedelta(seconds=START_IN_S) <= run.run_at \
            <= db_now() + timedelta(seconds=START_IN_S)

    flaky = one_off["flaky"]
    assert f"Created {len(entries) + 4} jobs ({len(entries)} cron, 4 one-off)" in out
    assert f'curl -H "Authorization: Token {token}" http://127.0.0.1:8000/api/jobs/' in out
    assert accepted(token)
    assert f"http://127.0.0.1:8000/api/jobs/{flaky.pk}/runs/" in out
    for job in [*cron_jobs, *one_off.values()]:
        assert str(job.pk) in out


@pytest.mark.django_db
def test_loaddemo_twice_lists_the_loaded_demo_and_again_loads_a_copy():
    first, _ = loaddemo()
    count = len(parse_file(DEMO_CRONTAB).entries) + 4

    # A job the demo user made itself is theirs, not the demo's: the line says whose.
    services.create_job("noop", {}, run_at=db_now(), owner=Job.objects.first().owner)
    second, err = loaddemo()
    assert err == ""
    assert f"already loaded (its user has {count + 1} jobs)" in second
    # Its one-off jobs may have finished long ago: the hints point at their history,
    # not at something to watch happen.
    assert "Watch" not in second
    assert "`manage.py loaddemo --again` loads another copy" in second
    flaky = Job.objects.get(handler="flaky")
    assert f"once at {flaky.run_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} (UTC)" in second
    assert "The flaky job's attempts, retried after 1, 2 and 4 s:" in second
    assert Job.objects.count() == count + 1

    third, _ = loaddemo(again=True)
    assert f"Created {count} jobs" in third
    assert get_user_model().objects.filter(username="demo").count() == 1
    assert Job.objects.count() == 2 * count + 1
    # A new token each time (the last one cannot be shown again); earlier ones still work.
    tokens = [printed_token(out, "demo") for out in (first, second, third)]
    assert len(set(tokens)) == 3
    assert all(accepted(token) for token in tokens)


@pytest.mark.django_db
def test_owner_option_uses_an_existing_user_and_no_demo_user():
    alice = get_user_model().objects.create_user("alice", password="pw")
    out, _ = loaddemo(owner="alice")
    assert not get_user_model().objects.filter(username="demo").exists()
    assert Job.objects.exclude(owner=alice).count() == 0
    assert accepted(printed_token(out, "alice"))
    with pytest.raises(CommandError, match="nobody-here"):
        loaddemo(owner="nobody-here")


@pytest.mark.django_db
def test_bad_lines_are_reported_and_skipped_not_fatal(tmp_path):
    path = tmp_path / "mixed.crontab"
    path.write_text("@reboot /bin/boot\n61 * * * * /bin/bad\n# ok job\n*/5 * * * * /bin/ok\n"
                    "CRON_TZ=Nowhere/Land\n0 9 * * * /bin/tz\n")
    out, err = loaddemo(str(path))
    lines = err.splitlines()
    assert lines[0].startswith(f"{path}:1: skipped: @reboot")
    assert lines[1] == f"{path}:2: skipped: bad minute field '61': 61 is out of range 0-59"
    assert lines[2].startswith(f"{path}:5: skipped: unknown IANA timezone 'Nowhere/Land'")
    assert lines[3].startswith(f"{path}:6: skipped: unknown IANA timezone")
    (job,) = Job.objects.all()  # no one-off demo jobs when files are given
    assert (job.name, job.payload) == ("ok job", {"command": "/bin/ok", "source": f"{path}:4"})
    assert "Created 1 jobs (1 cron, 0 one-off)" in out and "skipped 4 crontab lines" in out


@pytest.mark.django_db
def test_missing_file_is_a_command_error(tmp_path):
    with pytest.raises(CommandError, match="no such crontab file"):
        loaddemo(str(tmp_path / "absent.crontab"))
    assert not Job.objects.exists()


def first_from(schedule: str, tz: str, moment: datetime) -> datetime:
    """The first occurrence of ``schedule`` in ``tz`` at or after ``moment`` (whole
    seconds), from cronsim (the Debian-cron oracle, not jobs.schedules.cron), as a UTC datetime."""
    start = (moment - timedelta(seconds=1)).astimezone(ZoneInfo(tz))
    return next(CronSim(schedule, start)).astimezone(UTC)


def occurrences(schedule: str, tz: str, first: datetime, until: datetime) -> set[datetime]:
    """Occurrences of ``schedule`` in ``tz`` from ``first`` (included) to ``until``
    (included), as UTC datetimes."""
    found = set()
    moment = first_from(schedule, tz, first)
    while moment <= until:
        found.add(moment)
        moment = first_from(schedule, tz, moment + timedelta(seconds=1))
    return found


@pytest.mark.django_db
@pytest.mark.parametrize("name", CORPUS)
def test_real_crontab_loads_and_the_scheduler_runs_its_lines(name):
    path = CRONTABS / name
    parsed = parse_file(path)
    _, err = loaddemo(str(path))
    assert [line.split(": skipped: ")[0] for line in err.splitlines()] == [
        f"{path}:{e.line_number}" for e in parsed.errors]
    jobs = {j.payload["source"]: j for j in Job.objects.select_related("schedule")}
    assert Job.objects.count() == len(jobs) == len(parsed.entries)
    entries = {}
    for entry in parsed.entries:
        job = jobs[f"{path}:{entry.line_number}"]  # every valid schedule line became a job
        assert job.payload["command"] == entry.command
        assert (job.schedule.cron, job.schedule.timezone) == (normalize(entry.schedule),
                                                              entry.timezone)
        entries[job.pk] = entry

    # Make them due as if created three minutes ago: next_run_at is each job's first
    # occurrence from then on (the scheduler's invariant: next_run_at is an occurrence).
    start = (db_now() - timedelta(minutes=3)).replace(second=0, microsecond=0)
    first = {}
    for pk, entry in entries.items():
        first[pk] = first_from(normalize(entry.schedule), entry.timezone, start)
        Job.objects.filter(pk=pk).update(next_run_at=first[pk])
    Schedule.objects.update(misfire_policy="run_all")
    lookahead = timedelta(seconds=conf.get("LOOKAHEAD_S"))
    low = db_now() + lookahead
    created = Scheduler(partitions=1).tick()
    high = db_now() + lookahead  # the tick's own horizon lies between low and high

    runs = list(Run.objects.filter(job_id__in=entries).values_list("job_id", "scheduled_at"))
    assert len(runs) == len(set(runs)) == created, "a (job, scheduled_at) is duplicated"
    for pk, entry in entries.items():
        actual = {at for job_id, at in runs if job_id == pk}
        must = occurrences(normalize(entry.schedule), entry.timezone, first[pk], low)
        may = occurrences(normalize(entry.schedule), entry.timezone, first[pk], high)
        where = f"line {entry.line_number} {entry.schedule!r} in {entry.timezone}"
        assert must <= actual <= may, f"{where}: expected {sorted(must)}, got {sorted(actual)}"
        after = max(actual) if actual else first[pk] - timedelta(seconds=1)
        following = first_from(normalize(entry.schedule), entry.timezone,
                               after + timedelta(seconds=1))
        assert Job.objects.get(pk=pk).next_run_at == following, where


@pytest.mark.django_db
def test_listing_a_loaded_demo_shows_each_jobs_next_run_as_things_stand():
    loaddemo()
    demo = get_user_model().objects.get(username="demo")
    one_off = {j.handler: j for j in Job.objects.filter(owner=demo, schedule__isnull=True)}
    Run.objects.filter(job=one_off["noop"]).update(state="succeeded")
    Run.objects.filter(job=one_off["always_fails"]).update(state="dead")
    Run.objects.filter(job=one_off["sleep"]).update(
        state="running", worker_id="w1", lease_expires_at=db_now() + timedelta(minutes=1))
    cron = Job.objects.filter(owner=demo, schedule__isnull=False).order_by("pk")
    services.pause([cron[0].pk])

    out, _ = loaddemo()

    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    assert rows[str(one_off["noop"].pk)].endswith("none: its run succeeded")
    assert rows[str(one_off["always_fails"].pk)].endswith("none: its run died (dead letter)")
    assert rows[str(one_off["sleep"].pk)].endswith("running now")
    flaky_run_at = Run.objects.get(job=one_off["flaky"]).run_at
    assert rows[str(one_off["flaky"].pk)].endswith(f"{flaky_run_at:%Y-%m-%d %H:%M:%S}")
    assert rows[str(cron[0].pk)].endswith("none: paused")
    nxt = Job.objects.get(pk=cron[1].pk).next_run_at
    assert rows[str(cron[1].pk)].endswith(f"{nxt:%Y-%m-%d %H:%M:%S}")


@pytest.mark.django_db
def test_a_second_start_shows_current_cron_next_runs_not_the_stale_stored_ones():
    loaddemo()
    # As after the demo was stopped for an hour: the scheduler did not advance next_run_at.
    stale = db_now() - timedelta(hours=1)
    Job.objects.filter(schedule__isnull=False).update(next_run_at=stale)

    out, _ = loaddemo()

    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    now = db_now()
    for job in Job.objects.filter(schedule__isnull=False).select_related("schedule"):
        shown = datetime.strptime(rows[str(job.pk)][-19:], "%Y-%m-%d %H:%M:%S").replace(
            tzinfo=UTC)
        assert shown > now - timedelta(seconds=1), rows[str(job.pk)]
        assert f"{stale.astimezone(UTC):%Y-%m-%d %H:%M:%S}" not in rows[str(job.pk)]


@pytest.mark.django_db
def test_a_workflow_nodes_job_is_listed_as_its_node_not_with_a_stale_next_run():
    """A node's job runs when its workflow reaches it: its stored next run means nothing."""
    from workflows import services as workflows

    loaddemo()
    demo = get_user_model().objects.get(username="demo")
    wf = workflows.create_workflow("etl", [{"name": "extract", "handler": "noop"}],
                                   owner=demo)
    node_job = wf.nodes.get().job

    out, _ = loaddemo()

    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    assert rows[str(node_job.pk)].endswith(f"node of workflow {wf.pk}")
