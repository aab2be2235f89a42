"""jobs/schedules/cron.py: syntax, the day-of-month/day-of-week rule, the calendar, daylight saving
(the table in docs/cron.md, read from the file) and jitter. Pure Python, no database."""

import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.schedules import cron

DOCS = Path(__file__).resolve().parents[1] / "docs" / "cron.md"
ZONES = {"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def runs(expression: str, after: str, count: int, tz: str = "UTC") -> list[str]:
    """The next ``count`` occurrences after ``after`` (UTC), as "YYYY-MM-DD HH:MM" UTC."""
    found = []
    for moment in cron.iter_after(expression, tz, utc(after)):
        found.append(moment.strftime("%Y-%m-%d %H:%M"))
        if len(found) == count:
            break
    return found


def days(expression: str, after: str, count: int) -> list[str]:
    return [r[:10] for r in runs(expression, after, count)]


# -- syntax ------------------------------------------------------------------------------

@pytest.mark.parametrize("expression, after, expected", [
    ("*/15 * * * *", "2025-01-01 00:00", ["00:15", "00:30", "00:45", "01:00"]),
    ("5-20/5 9 * * *", "2025-01-01 00:00", ["09:05", "09:10", "09:15", "09:20"]),
    ("50/5 9 * * *", "2025-01-01 00:00", ["09:50", "09:55", "09:50", "09:55"]),
    ("0,30 9,17 * * *", "2025-01-01 00:00", ["09:00", "09:30", "17:00", "17:30"]),
    ("00 07 * * *", "2025-01-01 00:00", ["07:00", "07:00"]),
])
def test_lists_ranges_steps_and_leading_zeros(expression, after, expected):
    assert [r[11:] for r in runs(expression, after, len(expected))] == expected


def test_a_stepped_month_range():
    assert days("0 12 1 JAN-MAY/2 *", "2025-01-30 00:00", 3) == [
        "2025-03-01", "2025-05-01", "2026-01-01"]


def test_month_and_day_names_in_any_case():
    assert days("0 12 1 mar,Dec *", "2025-01-01 00:00", 3) == [
        "2025-03-01", "2025-12-01", "2026-03-01"]
    assert days("0 12 * * mon-WED", "2025-01-01 00:00", 4) == [  # 2025-01-01 is a Wednesday
        "2025-01-01", "2025-01-06", "2025-01-07", "2025-01-08"]


def test_sunday_is_0_and_7_and_a_weekday_step_runs_over_0_to_7():
    assert days("0 0 * * 7", "2025-01-01 00:00", 2) == days("0 0 * * 0", "2025-01-01 00:00", 2)
    assert days("0 0 * * 1/2", "2025-01-05 00:00", 4) == [  # Mon, Wed, Fri, Sun
        "2025-01-06", "2025-01-08", "2025-01-10", "2025-01-12"]


@pytest.mark.parametrize("macro, fields", [
    ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"), ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"), ("@Daily", "0 0 * * *"),
])
def test_macros_expand_to_their_five_fields(macro, fields):
    assert cron.normalize(macro) == fields


def test_normalize_collapses_blanks_and_keeps_values_as_written():
    assert cron.normalize("  0\t9 *  * mon-fri ") == "0 9 * * mon-fri"


@pytest.mark.parametrize("expression, message", [
    ("@reboot", "@reboot has no meaning here"),
    ("@every 5m", "unknown macro '@every 5m'"),
    ("* * * * * *", "got 6; a seconds or year field is not supported"),
    ("0 0 1 1 * 2030", "got 6; a seconds or year field is not supported"),
    ("* * * *", "expected 5 fields"),
    ("", "got 0"),
    ("61 * * * *", "bad minute field '61': 61 is out of range 0-59"),
    ("0,61 * * * *", "bad minute field '0,61': 61 is out of range 0-59"),
    ("0 24 * * *", "bad hour field '24': 24 is out of range 0-23"),
    ("0 0 0 * *", "bad day of month field '0': 0 is out of range 1-31"),
    ("0 0 * 13 *", "bad month field '13'"),
    ("0 0 * * 8", "bad day of week field '8'"),
    ("0 0 * * MONDAY", "bad day of week field 'MONDAY'"),
    ("0 0 * FOO *", "bad month field 'FOO': 'FOO' is not a number (names: JAN"),
    ("JAN * * * *", "bad minute field 'JAN': 'JAN' is not a number"),
    ("59-3 * * * *", "bad minute field '59-3': the range 59-3 runs backwards"),
    ("0 0 * * FRI-MON", "the range FRI-MON runs backwards"),
    ("*/0 * * * *", "bad minute field '*/0': a step must be 1 or more"),
    ("1,,2 * * * *", "an empty list item"),
    ("? * * * *", "bad minute field '?': '?' is not cron(5) syntax"),
    ("0 0 ? * MON", "bad day of month field '?'"),
    ("H * * * *", "hashed 'H' values are not supported"),
    ("0 0 15W * *", "'W' (nearest weekday) is supported only as LW"),
    ("0 0 L/2 * *", "bad day of month field 'L/2': only L or LW"),
    ("0 L * * *", "bad hour field 'L': L and # belong to the day fields"),
    ("0 0 * * L", "bad day of week field 'L': only 5L or 5#2"),
    ("0 0 * * FRIL", "bad day of week field 'FRIL'"),
    ("0 0 * * 5#0", "#0: the week of the month must be 1-5"),
    ("0 0 * * 5#6", "#6: the week of the month must be 1-5"),
    ("0 0 30 2 *", "never fires"),
    ("0 0 31 4,6,9,11 *", "never fires"),
    ("0 0 */31 * 1#5", "never fires"),  # the 1st is never a 5th Monday
])
def test_bad_expressions_name_the_field_and_the_reason(expression, message):
    with pytest.raises(ValueError) as error:
        cron.normalize(expression)

    assert message in str(error.value)


def test_next_after_refuses_naive_datetimes_and_unknown_zones():
    with pytest.raises(ValueError, match="aware"):
        cron.next_after("* * * * *", "UTC", datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="unknown IANA timezone 'Mars/Olympus'"):
        cron.next_after("* * * * *", "Mars/Olympus", utc("2025-01-01 00:00"))


# -- day of month and day of week ---------------------------------------------------------

def test_both_day_fields_restricted_means_either_matches():
    # June 2025: Friday the 13th; the 6th, 20th and 27th are the other Fridays.
    assert days("0 0 13 * 5", "2025-06-01 00:00", 5) == [
        "2025-06-06", "2025-06-13", "2025-06-20", "2025-06-27", "2025-07-04"]
    assert days("0 0 1-7 * MON", "2025-09-01 00:00", 9) == [  # 09-01 is a Monday
        "2025-09-02", "2025-09-03", "2025-09-04", "2025-09-05", "2025-09-06", "2025-09-07",
        "2025-09-08", "2025-09-15", "2025-09-22"]


def test_one_day_field_star_means_only_the_other_counts():
    assert days("0 0 13 * *", "2025-06-01 00:00", 2) == ["2025-06-13", "2025-07-13"]
    assert days("0 0 * * 5", "2025-06-01 00:00", 2) == ["2025-06-06", "2025-06-13"]


def test_a_field_starting_with_star_counts_as_unrestricted_as_in_cron5():
    # */2 starts with '*': both fields must match, so Mondays on odd days only.
    assert days("0 0 */2 * MON", "2025-01-01 00:00", 4) == [
        "2025-01-13", "2025-01-27", "2025-02-03", "2025-02-17"]
    # 1-31 does not: either matches, which is every day.
    assert days("0 0 1-31 * MON", "2025-01-01 00:00", 3) == [
        "2025-01-02", "2025-01-03", "2025-01-04"]


def test_last_day_last_weekday_last_friday_and_second_friday():
    assert days("0 0 L * *", "2024-01-01 00:00", 4) == [
        "2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30"]
    # The last weekday: 2025-05-31 is a Saturday, 2025-08-31 a Sunday.
    assert days("0 0 LW 5,8,9 *", "2025-01-01 00:00", 3) == [
        "2025-05-30", "2025-08-29", "2025-09-30"]
    assert days("0 0 * * 5L", "2025-01-01 00:00", 3) == [
        "2025-01-31", "2025-02-28", "2025-03-28"]
    assert days("0 0 * * FRI#2", "2025-01-01 00:00", 3) == [
        "2025-01-10", "2025-02-14", "2025-03-14"]
    assert days("0 0 * * 1#5", "2025-01-01 00:00", 3) == [  # months with five Mondays
        "2025-03-31", "2025-06-30", "2025-09-29"]
    # Both restricted, so either: the 15th, the last day, and the last Friday.
    assert days("0 0 15,L * 5L", "2025-01-01 00:00", 4) == [
        "2025-01-15", "2025-01-31", "2025-02-15", "2025-02-28"]


# -- calendar -----------------------------------------------------------------------------

def test_february_29_fires_only_in_leap_years():
    assert days("0 0 29 2 *", "2025-01-01 00:00", 3) == [
        "2028-02-29", "2032-02-29", "2036-02-29"]
    assert days("0 0 29 2 *", "2096-03-01 00:00", 1) == ["2104-02-29"]  # 2100 is no leap year


def test_day_31_fires_only_in_long_months():
    assert [d[5:7] for d in days("0 0 31 * *", "2025-01-01 00:00", 7)] == [
        "01", "03", "05", "07", "08", "10", "12"]


def test_occurrences_years_ahead_and_the_end_of_the_calendar():
    assert runs("0 0 1 1 *", "2400-06-01 00:00", 1) == ["2401-01-01 00:00"]
    assert list(cron.iter_after("0 0 1 1 *", "UTC", utc("9999-06-01 00:00"))) == []
    with pytest.raises(ValueError, match="no occurrence after"):
        cron.next_after("0 0 1 1 *", "UTC", utc("9999-06-01 00:00"))


def test_occurrences_include_first_and_until_and_stop_at_limit():
    first, until = utc("2025-01-01 00:00"), utc("2025-01-01 00:03")

    assert cron.occurrences("* * * * *", "UTC", first, until) == [
        first + timedelta(minutes=m) for m in range(4)]
    assert len(cron.occurrences("* * * * *", "UTC", first, until, limit=2)) == 2


def test_next_after_is_strictly_after_even_with_seconds():
    assert cron.next_after("* * * * *", "UTC", utc("2025-01-01 00:00")) == \
        utc("2025-01-01 00:01")
    assert cron.next_after("* * * * *", "UTC", utc("2025-01-01 00:00:00.5")) == \
        utc("2025-01-01 00:01")


# -- daylight saving: the table of docs/cron.md -------------------------------------------

def dst_table() -> list[tuple[str, str, str, list[str]]]:
    """(zone, schedule, after, [runs]) for each row of the DST table in docs/cron.md."""
    rows = []
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in ZONES:
            rows.append((cells[0], cells[1].strip("`"), cells[2],
                         [r.strip() for r in cells[3].split(",")]))
    return rows


def test_the_dst_table_covers_the_four_zones_and_both_changes():
    rows = dst_table()

    assert {zone for zone, *_ in rows} == ZONES
    assert len(rows) >= 16
    for zone in ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe"):
        # a fixed-time job and a job firing hourly or more often, at each change
        fixed = [r for r in rows if r[0] == zone and not r[1].split()[1].startswith("*")
                 and not r[1].split()[0].startswith("*")]
        wild = [r for r in rows if r[0] == zone and r not in fixed]
        assert len(fixed) >= 2 and len(wild) >= 2, zone


@pytest.mark.parametrize("zone, schedule, after, expected", dst_table())
def test_dst_cases_run_at_exactly_the_times_docs_cron_md_states(zone, schedule, after,
                                                                expected):
    assert runs(schedule, after, len(expected), zone) == expected


def test_berlin_fall_back_fixed_time_job_runs_once_not_twice():
    """The bug docs/architecture.md listed: croniter fired at 00:30 and 01:30 UTC."""
    day = cron.occurrences("30 2 * * *", "Europe/Berlin", utc("2025-10-26 00:00"),
                           utc("2025-10-26 23:59"))

    assert day == [utc("2025-10-26 00:30")]


def test_starting_inside_an_overlap_never_goes_back_and_never_repeats():
    second_pass = utc("2025-10-26 01:10")  # 02:10 CET, the second 02:10 that night
    first_pass = utc("2025-10-26 00:10")   # 02:10 CEST

    assert cron.next_after("30 2 * * *", "Europe/Berlin", second_pass) == \
        utc("2025-10-27 01:30")
    assert cron.next_after("30 2 * * *", "Europe/Berlin", first_pass) == \
        utc("2025-10-26 00:30")
    # A wildcard job started in the first pass still gets the second pass of 02:05.
    assert runs("5 * * * *", "2025-10-26 00:10", 3, "Europe/Berlin") == [
        "2025-10-26 01:05", "2025-10-26 02:05", "2025-10-26 03:05"]


def test_several_fixed_times_inside_a_gap_give_one_run():
    assert runs("15,45 2 * * *", "2025-03-29 12:00", 3, "Europe/Berlin") == [
        "2025-03-30 01:00", "2025-03-31 00:15", "2025-03-31 00:45"]


def test_every_minute_across_both_changes_is_every_real_minute():
    for start in ("2025-03-30 00:30", "2025-10-26 00:30"):
        found = cron.occurrences("* * * * *", "Europe/Berlin", utc(start),
                                 utc(start) + timedelta(hours=1))
        assert found == [utc(start) + timedelta(minutes=m) for m in range(61)]


# -- jitter ---------------------------------------------------------------------------------

def test_jitter_is_deterministic_per_job_and_within_the_window():
    assert cron.jitter_offset(42, 0) == 0.0
    assert cron.jitter_offset(42, 60) == cron.jitter_offset(42, 60)
    offsets = [cron.jitter_offset(job_id, 60) for job_id in range(1, 1001)]
    assert all(0 <= o <= 60 for o in offsets)
    assert len(set(offsets)) > 950
    assert all(o == round(o, 3) for o in offsets)


def test_jitter_spreads_20000_jobs_due_at_the_same_minute_evenly():
    per_second = Counter(int(cron.jitter_offset(job_id, 60)) for job_id in range(1, 20_001))

    assert set(per_second) <= set(range(61)) and len(per_second) >= 60
    assert 250 <= min(per_second[s] for s in range(60)) <= max(per_second.values()) <= 420


def test_docs_state_the_defaults_the_model_has():
    from jobs.models import MisfirePolicy, Schedule

    text = DOCS.read_text()
    fields = {f.name: f.default for f in Schedule._meta.get_fields() if hasattr(f, "default")}
    assert fields["misfire_policy"] == MisfirePolicy.RUN_ONCE and "`run_once` (default)" in text
    assert fields["max_lag_s"] == 3600 and re.search(r"`max_lag_s` \| `3600`", text)
    assert fields["jitter_s"] == 0 and re.search(r"`jitter_s` \| `0`", text)


def test_a_valid_cron_longer_than_its_column_is_a_value_error_not_a_database_error():
    """Every minute and hour listed is valid cron(5) and 237 characters: the REST job
    serializer refused it, but a workflow's schedule and the Python API reached the
    200-character column and failed with a DataError (a 500 over REST)."""
    from jobs.models import Schedule

    every = (",".join(str(m) for m in range(60)) + " "
             + ",".join(str(h) for h in range(24)) + " * * *")
    assert cron.MAX_TEXT == Schedule._meta.get_field("cron").max_length
    with pytest.raises(ValueError, match="at most 200 characters; this one has 237"):
        cron.normalize(every)
    assert cron.normalize("0-59 0-23 * * *") == "0-59 0-23 * * *"
