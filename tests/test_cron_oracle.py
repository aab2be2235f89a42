"""jobs.schedules.cron against an independent evaluator: cronsim, which follows Debian's cron(8).

For every schedule line of the real crontab corpus (tests/data/crontabs/) and for 2,000
generated expressions, the next 50 occurrences from jobs.schedules.cron must equal cronsim's, in UTC
and in four zones, starting so that the 50 straddle a daylight-saving change. The two
kinds of difference docs/cron.md lists as deliberate are checked, not skipped:

* cronsim reads a one-value range with a step (``56-56/1``) as ``56/1`` (56 to 59); cron(8)
  reads it as 56. Such expressions are compared with cronsim on the rewritten ``56``.
* In Australia/Lord_Howe (a 30-minute shift) cronsim's hour stepping skips or shifts
  local times of jobs with a ``*`` minute or hour. There ours must equal the definition
  itself: every real instant whose local time matches, with cronsim matching the fields on
  naive local times, so the check still rests on cronsim and not on our code.
"""

import random
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError

from jobs.schedules import cron
from jobs.schedules.crontab_files import parse_file

CRONTABS = Path(__file__).resolve().parent / "data" / "crontabs"  # README.md there: sources
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata")
HALF_HOUR_SHIFT = "Australia/Lord_Howe"
COUNT = 50
CORPUS_SIZE = 1200
SEED = 20251026
YEARS = (2025, 2026, 2027)
# Compare at most this far ahead: cronsim stops after 50 years without a match, and a
# pattern as rare as "Feb 29 on a Sunday" has only a few occurrences per century.
HORIZON = timedelta(days=366 * 120)


def transitions(name: str, year: int) -> list[datetime]:
    """The UTC instants in ``year`` at which zone ``name`` changes its UTC offset."""
    zone, found = ZoneInfo(name), []
    moment = datetime(year, 1, 1, tzinfo=UTC)
    offset = moment.astimezone(zone).utcoffset()
    while moment.year == year:
        later = moment + timedelta(hours=1)
        if later.astimezone(zone).utcoffset() != offset:
            low, high = moment, later
            while high - low > timedelta(minutes=1):
                middle = (low + (high - low) / 2).replace(second=0, microsecond=0)
                if middle.astimezone(zone).utcoffset() == offset:
                    low = middle
                else:
                    high = middle
            found.append(high)
            offset = later.astimezone(zone).utcoffset()
        moment = later
    return found


CHANGES = {zone: [t for year in YEARS for t in transitions(zone, year)] for zone in ZONES}


def take(iterable, after: datetime) -> list[datetime]:
    """The first COUNT instants of ``iterable`` (aware) within HORIZON of ``after``, UTC."""
    found = []
    try:
        for moment in iterable:
            moment = moment.astimezone(UTC)
            if moment > after + HORIZON or len(found) == COUNT:
                break
            found.append(moment)
    except StopIteration:  # cronsim gives up after 50 years without a match
        pass
    return found


def oracle(expression: str, zone: str, after: datetime) -> list[datetime]:
    return take(CronSim(expression, after.astimezone(ZoneInfo(zone))), after)


def ours(expression: str, zone: str, after: datetime) -> list[datetime]:
    return take(cron.iter_after(expression, zone, after), after)


def by_definition(expression: str, zone: str, after: datetime) -> list[datetime]:
    """The real-instant rule itself: every instant after ``after`` whose local time
    matches, cronsim matching the fields on naive local times (no DST logic involved)."""
    tz = ZoneInfo(zone)
    walls = CronSim(expression, after.astimezone(tz).replace(tzinfo=None) - timedelta(hours=3))
    found: set[datetime] = set()
    for wall in walls:
        for fold in (0, 1):
            instant = wall.replace(tzinfo=tz, fold=fold).astimezone(UTC)
            real = instant.astimezone(tz).replace(tzinfo=None) == wall
            if real and after < instant <= after + HORIZON:
                found.add(instant)
        earliest_next = wall.replace(tzinfo=tz).astimezone(UTC) - timedelta(hours=3)
        if earliest_next > after + HORIZON or (
                len(found) >= COUNT and earliest_next > sorted(found)[COUNT - 1]):
            break
    return sorted(found)[:COUNT]


NAMES = {**{n: i for i, n in enumerate("SUN MON TUE WED THU FRI SAT".split())},
         **{n: i for i, n in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC"
                                         .split(), start=1)}}
ONE_VALUE_RANGE = re.compile(r"^(\w+)-(\w+)/\d+$")


def _value(token: str) -> int:
    return int(token) if token.isdigit() else NAMES[token.upper()]


def for_cronsim(expression: str) -> str:
    """``expression`` with each one-value stepped range ``a-a/s`` written as ``a``: what
    cron(8) means by it, and what cronsim then reads the same way."""
    fields = []
    for field in expression.split():
        terms = []
        for term in field.split(","):
            match = ONE_VALUE_RANGE.match(term)
            same = match and _value(match.group(1)) == _value(match.group(2))
            terms.append(match.group(1) if same else term)
        fields.append(",".join(terms))
    return " ".join(fields)


def start_for(expression: str, change: datetime) -> datetime:
    """A start instant from which the next 50 occurrences straddle ``change``: about 25
    typical intervals (measured in UTC by cronsim) before it."""
    first = take(CronSim(for_cronsim(expression), change), change)[:3]
    interval = (first[-1] - first[0]) / (len(first) - 1) if len(first) > 1 \
        else timedelta(days=1)
    return (change - interval * (COUNT // 2) - timedelta(hours=2)).replace(second=0)


def check(expression: str, zone: str, after: datetime) -> str:
    """Compare one case; returns "same", "range" or "half-hour" (the deliberate
    differences of docs/cron.md), or fails the test with the first differing occurrence."""
    mine = ours(expression, zone, after)
    theirs = oracle(for_cronsim(expression), zone, after)
    if mine == theirs:
        return "same" if for_cronsim(expression) == expression else "range"
    if zone == HALF_HOUR_SHIFT and not cron.parse(expression).wall_clock:
        if mine == by_definition(for_cronsim(expression), zone, after):
            return "half-hour"
    index = next(i for i, (a, b) in enumerate(zip(mine + [None], theirs + [None],
                                                   strict=False)) if a != b)
    pytest.fail(f"{expression!r} in {zone} after {after.isoformat()}: occurrence {index} "
                f"is {mine[index:index + 2]} here, {theirs[index:index + 2]} in cronsim")


# -- the generated corpus ----------------------------------------------------------------

MONTH_NAMES = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
DAY_NAMES = "SUN MON TUE WED THU FRI SAT".split()


def _number(rng: random.Random, low: int, high: int, names=None, first=0) -> tuple[str, int]:
    value = rng.randint(low, high)
    if names and first <= value < first + len(names) and rng.random() < 0.3:
        name = names[value - first]
        return (name.lower() if rng.random() < 0.3 else name), value
    return (f"{value:02d}" if rng.random() < 0.05 else str(value)), value


def _term(rng, low, high, names=None, first=0, hot=()) -> str:
    kind = rng.random()
    if kind < 0.35:
        return str(rng.choice(hot)) if hot and rng.random() < 0.6 \
            else _number(rng, low, high, names, first)[0]
    if kind < 0.6:
        a_text, a = _number(rng, low, high - 1, names, first)
        b_text, b = _number(rng, a, high, names, first)
        step = f"/{rng.randint(1, max(1, b - a))}" if rng.random() < 0.4 else ""
        return f"{a_text}-{b_text}{step}"
    if kind < 0.75:
        return f"*/{rng.randint(1, high - low + 1)}"
    if kind < 0.85:
        return f"{_number(rng, low, high, names, first)[0]}/{rng.randint(1, high - low + 1)}"
    return _number(rng, low, high, names, first)[0]


def _field(rng, low, high, star, names=None, first=0, hot=(), special=None) -> str:
    if rng.random() < star:
        return "*"
    terms = []
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3)):
        use_special = special is not None and rng.random() < 0.15
        terms.append(special(rng) if use_special else _term(rng, low, high, names, first, hot))
    return ",".join(terms)


def _last_day(rng) -> str:
    return rng.choice(["L", "LW"])


def _nth_or_last_weekday(rng) -> str:
    day = rng.randint(0, 7)
    if rng.random() < 0.5:
        return f"{day}L"
    name = DAY_NAMES[day % 7] if rng.random() < 0.3 else str(day)
    return f"{name}#{rng.randint(1, 5)}"


def random_expression(rng: random.Random) -> str:
    """One expression in the syntax docs/cron.md accepts, biased towards the hours around
    DST changes (0-3) and the days and months that make calendars interesting."""
    return " ".join([
        _field(rng, 0, 59, 0.25, hot=(0, 15, 30, 45, 59)),
        _field(rng, 0, 23, 0.35, hot=(0, 1, 2, 3)),
        _field(rng, 1, 31, 0.6, hot=(1, 15, 28, 29, 30, 31), special=_last_day),
        _field(rng, 1, 12, 0.65, MONTH_NAMES, 1, hot=(2, 3, 4, 10, 11)),
        _field(rng, 0, 7, 0.6, DAY_NAMES, 0, special=_nth_or_last_weekday),
    ])


def never_fires_in_cronsim(expression: str) -> bool:
    try:
        return not take(CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC)),
                        datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        return True


def generated_corpus() -> tuple[list[str], list[str]]:
    """CORPUS_SIZE valid expressions (seeded), and the candidates refused on the way."""
    rng, valid, refused = random.Random(SEED), [], []
    while len(valid) < CORPUS_SIZE:
        expression = random_expression(rng)
        try:
            cron.normalize(expression)
            valid.append(expression)
        except ValueError:
            refused.append(expression)
    return valid, refused


def corpus_lines() -> list[tuple[str, str]]:
    """(file:line, schedule) of every valid schedule line of the crontab corpus."""
    found = []
    for path in sorted(CRONTABS.glob("*.crontab")):
        for entry in parse_file(path).entries:
            found.append((f"{path.name}:{entry.line_number}", cron.normalize(entry.schedule)))
    return found


@pytest.mark.slow
def test_generated_expressions_equal_cronsim_across_dst_changes_in_five_zones():
    rng = random.Random(SEED + 1)
    outcomes = {"same": 0, "range": 0, "half-hour": 0}
    began = time.perf_counter()

    valid, refused = generated_corpus()
    for expression in refused:  # only day patterns that never match, such as Feb 31
        assert "never fires" in str(pytest.raises(ValueError, cron.normalize, expression).value)
        assert never_fires_in_cronsim(for_cronsim(expression)), expression
    for expression in valid:
        for zone in ZONES:
            change = rng.choice(CHANGES[zone] or [datetime(2025, 10, 26, 1, tzinfo=UTC)])
            outcomes[check(expression, zone, start_for(expression, change))] += 1

    assert sum(outcomes.values()) == CORPUS_SIZE * len(ZONES)
    assert outcomes["same"] > 0.8 * CORPUS_SIZE * len(ZONES), outcomes
    print(f"\n{CORPUS_SIZE} expressions x {len(ZONES)} zones: {outcomes}, "
          f"{len(refused)} never-firing candidates refused, "
          f"{time.perf_counter() - began:.1f} s")


@pytest.mark.slow
def test_every_corpus_crontab_line_equals_cronsim_around_every_change_in_five_zones():
    lines = corpus_lines()
    assert len(lines) > 150  # 179 schedule lines, a few of them invalid or @reboot

    for _, expression in lines:
        for zone in ZONES:
            for change in CHANGES[zone][:2] or [datetime(2025, 3, 30, 1, tzinfo=UTC)]:
                check(expression, zone, start_for(expression, change))


def test_the_changes_are_the_ones_docs_cron_md_names():
    assert CHANGES["Europe/Berlin"][:2] == [datetime(2025, 3, 30, 1, tzinfo=UTC),
                                            datetime(2025, 10, 26, 1, tzinfo=UTC)]
    assert CHANGES["America/New_York"][:2] == [datetime(2025, 3, 9, 7, tzinfo=UTC),
                                               datetime(2025, 11, 2, 6, tzinfo=UTC)]
    assert CHANGES["Australia/Lord_Howe"][:2] == [datetime(2025, 4, 5, 15, tzinfo=UTC),
                                                  datetime(2025, 10, 4, 15, 30, tzinfo=UTC)]
    assert CHANGES["Asia/Kolkata"] == CHANGES["UTC"] == []


def test_the_comparison_itself_catches_a_wrong_evaluator():
    """The oracle check is able to fail: croniter's fall-back double fire is caught."""
    from croniter import croniter

    berlin = ZoneInfo("Europe/Berlin")
    after = datetime(2025, 10, 25, 12, tzinfo=UTC)
    iterator = croniter("30 2 * * *", after.astimezone(berlin))
    wrong = [iterator.get_next(datetime).astimezone(UTC) for _ in range(3)]

    assert wrong != oracle("30 2 * * *", "Europe/Berlin", after)[:3]
    assert ours("30 2 * * *", "Europe/Berlin", after)[:3] == \
        oracle("30 2 * * *", "Europe/Berlin", after)[:3]


@pytest.mark.parametrize("expression, meaning", [
    ("56-56/1 * * * *", "56 * * * *"),
    ("0 0 1 sep-9/1 *", "0 0 1 sep *"),
    ("0 12 * * MON-1/2", "0 12 * * MON"),
])
def test_a_one_value_range_with_a_step_is_that_value_as_in_cron8(expression, meaning):
    after = datetime(2025, 1, 1, tzinfo=UTC)

    assert for_cronsim(expression) == meaning
    assert ours(expression, "UTC", after) == oracle(meaning, "UTC", after)
    assert oracle(expression, "UTC", after) != oracle(meaning, "UTC", after)  # cronsim's quirk


@pytest.mark.parametrize("expression, after, expected_here, cronsim_says", [
    # 01:45 happens twice on 2025-04-06 (02:00 LHDT -> 01:30 LHST): both are real instants.
    ("45 * * * *", "2025-04-05 13:00",
     ["13:45", "14:45", "15:15", "16:15"], ["13:45", "14:45", "16:15", "17:15"]),
    # 02:30 LHDT exists on 2025-10-05 (the gap is 02:00-02:29).
    ("30 * * * *", "2025-10-04 14:00", ["15:00", "15:30", "16:30"], ["15:00", "16:30", "17:30"]),
])
def test_lord_howe_half_hour_shift_is_where_cronsim_and_we_differ(expression, after,
                                                                   expected_here, cronsim_says):
    start = datetime.fromisoformat(after).replace(tzinfo=UTC)
    n = len(expected_here)

    here = [t.strftime("%H:%M") for t in ours(expression, HALF_HOUR_SHIFT, start)[:n]]
    there = [t.strftime("%H:%M") for t in oracle(expression, HALF_HOUR_SHIFT, start)[:n]]
    defined = [t.strftime("%H:%M") for t in by_definition(expression, HALF_HOUR_SHIFT, start)[:n]]

    assert here == defined == expected_here
    assert there == cronsim_says
