"""Hypothesis fuzzes the cron, timezone and run_at validators through the REST API (create,
bulk create, partial update): never a 500, a bad value never stored, and whatever is
stored is valid (a cron expression that normalises to itself, a known IANA zone, an aware
run_at with its run)."""

import json
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import available_timezones

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.models import Job, Schedule
from jobs.schedules import cron
from runs.models import Run
from tests.test_api_helpers import recurring

pytestmark = pytest.mark.django_db

ZONES = sorted(available_timezones())
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

field = st.one_of(
    st.sampled_from(["*", "?", "L", "W", "0", "7", "59", "60", "61", "-1", "99999999999",
                     "mon", "sun", "jan", "dec", "mon-fri", "1-5", "5-1", "*/0", "*/15",
                     "1,2,3", "1,,2", "0-59/5", "#", "1#2", "5L", "15W", "\u0663", "",
                     "\x00", "\ud800"]),
    st.integers(-5, 70).map(str),
    st.text(alphabet="0123456789*/-,LW#?abcdefghijklmnopqrstuvwxyz", max_size=8),
)
crons = st.one_of(
    st.lists(field, min_size=3, max_size=7).map(" ".join),
    st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually",
                     "@midnight", "@reboot", "@every 5m", "@HOURLY", "  @daily  ", ""]),
    st.text(max_size=40),
)
zones = st.one_of(
    st.sampled_from(ZONES),
    st.sampled_from(["Europe", "America", "right/UTC", "posixrules", "Factory", "utc",
                     "UTC ", "Europe/Berlin\x00", "../etc/passwd", "/etc/localtime", "a" * 300,
                     "Etc/GMT+14", "Etc/GMT-15", ".", "", "\ud800"]),
    st.text(max_size=40),
)
offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
aware = st.builds(lambda d, tz: d.replace(tzinfo=tz),
                  st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
                  offsets)
run_ats = st.one_of(
    aware.map(datetime.isoformat),
    aware.map(lambda d: d.isoformat().replace("+00:00", "Z")),
    aware.map(lambda d: d.strftime("%Y%m%dT%H%M%S%z")),
    st.datetimes().map(datetime.isoformat),                          # naive
    st.dates().map(lambda d: d.isoformat()),                          # a date, no time
    st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00",
                     "2030-02-30T00:00:00Z", "2030-01-01T24:00:00Z", "2030-01-01T00:00:00+24:00",
                     "now", "", "2030-01-01 00:00:00+01", "\ud800"]),
    st.text(max_size=40),
    st.integers(),
    st.none(),
)


def send(api, method, path, body):
    # json.dumps escapes lone surrogates the way a JSON client would send them.
    return api.generic(method, path, json.dumps(body), content_type="application/json")


def counts():
    return Job.objects.count(), Schedule.objects.count(), Run.objects.count()


def assert_valid_recurring(job: Job):
    assert cron.normalize(job.schedule.cron) == job.schedule.cron
    assert job.schedule.timezone in ZONES
    assert job.next_run_at is not None and job.next_run_at.tzinfo is not None
    assert job.next_run_at == cron.next_after(job.schedule.cron, job.schedule.timezone,
                                              job.next_run_at - timedelta(microseconds=1))


@FUZZ
@given(expression=crons, tz=zones)
def test_fuzzed_cron_and_timezone_create_a_valid_job_or_a_400_storing_nothing(
        api, expression, tz):
    before = counts()

    response = send(api, "POST", "/api/jobs/", {"handler": "noop", "schedule": expression,
                                                "timezone": tz})

    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert set(response.json()) & {"schedule", "timezone"}, response.json()
        assert counts() == before
    else:
        assert counts() == (before[0] + 1, before[1] + 1, before[2])
        assert_valid_recurring(Job.objects.select_related("schedule").get(
            pk=response.json()["id"]))


@FUZZ
@given(run_at=run_ats)
def test_fuzzed_run_at_creates_an_aware_one_off_job_or_a_400_storing_nothing(api, run_at):
    before = counts()

    response = send(api, "POST", "/api/jobs/", {"handler": "noop", "run_at": run_at})

    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert set(response.json()) & {"run_at", "schedule"}, response.json()
        assert counts() == before
        return
    job = Job.objects.get(pk=response.json()["id"])
    assert job.run_at.tzinfo is not None
    if run_at is not None:  # null, like no run_at at all, means run once now (docs/api.md)
        assert isinstance(run_at, str)
        assert datetime.fromisoformat(run_at.replace("Z", "+00:00")).astimezone(UTC) == (
            job.run_at)
    assert list(Run.objects.filter(job=job).values_list("scheduled_at", flat=True)) == [
        job.run_at]
    assert counts() == (before[0] + 1, before[1], before[2] + 1)


@FUZZ
@given(expression=crons, tz=zones)
def test_fuzzed_schedule_changes_apply_whole_or_not_at_all(api, alice, expression, tz):
    job = recurring(alice)
    before = (Job.objects.filter(pk=job.pk).values().get(),
              Schedule.objects.filter(pk=job.schedule_id).values().get())

    response = send(api, "PATCH", f"/api/jobs/{job.pk}/", {"schedule": expression,
                                                          "timezone": tz})

    assert response.status_code in (200, 400), response.content
    after = Job.objects.select_related("schedule").get(pk=job.pk)
    if response.status_code == 400:
        assert (Job.objects.filter(pk=job.pk).values().get(),
                Schedule.objects.filter(pk=job.schedule_id).values().get()) == before
    else:
        assert after.schedule.timezone == tz
        assert_valid_recurring(after)


@FUZZ
@given(items=st.lists(st.fixed_dictionaries({}, optional={
    "schedule": crons, "timezone": zones, "run_at": run_ats}), min_size=1, max_size=5))
def test_a_fuzzed_bulk_request_stores_all_or_nothing(api, items):
    jobs = [{"handler": "noop", **item} for item in items]
    before = counts()

    response = send(api, "POST", "/api/jobs/bulk/", {"jobs": jobs})

    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert counts() == before
        assert all(0 <= e["index"] < len(jobs) for e in response.json()["errors"])
    else:
        created = Job.objects.select_related("schedule").filter(pk__in=response.json()["ids"])
        assert created.count() == len(jobs)
        for job in created:
            if job.schedule is not None:
                assert_valid_recurring(job)
            else:
                assert job.run_at.tzinfo is not None
