"""Cron expressions in an IANA timezone, evaluated the way Debian's cron(8) does.

Syntax (cron(5), plus the extensions listed in docs/cron.md): five fields, minute hour
day-of-month month day-of-week, or one of the macros @yearly @annually @monthly @weekly
@daily @midnight @hourly. A field is ``*`` or a comma list of numbers, three-letter names
(month and day of week, any case), ranges ``a-b`` and steps ``*/s``, ``a-b/s``, ``a/s``;
day of week 0 and 7 are Sunday. Extensions: ``L`` (last day) and ``LW`` (last weekday) in
day of month, ``5L`` (last Friday) and ``5#2`` (second Friday) in day of week. Anything
else raises ValueError naming the field.

The rules, from cron(5) and Debian cron's cron.c, and why this module evaluates the fields
itself instead of iterating croniter, are in docs/cron.md. In short:

* Day of month and day of week: when both are restricted (neither field starts with
  ``*``) a day matches when either does; otherwise both must (``*`` matches everything).
* A job whose minute and hour fields both do not start with ``*`` is a fixed-time job: it
  follows the wall clock. A local time skipped by a spring-forward gap fires once at the
  end of the gap; a local time repeated by a fall-back overlap fires once, the first time.
* Any other job (a ``*`` minute or hour) fires at every real instant whose local time
  matches: never inside a gap, and in both passes of an overlap.

Occurrences are whole minutes, returned as aware UTC datetimes.
"""

import calendar
import hashlib
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, UTC, date, datetime, timedelta
from functools import lru_cache
from heapq import heappop, heappush
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
MONTHS = {name: i for i, name in enumerate(
    "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(), start=1)}
DAYS = {name: i for i, name in enumerate("SUN MON TUE WED THU FRI SAT".split())}
NAMES = (None, None, None, MONTHS, DAYS)
# The Gregorian calendar repeats every 400 years, so a day pattern with no match in 400
# years never matches.
SEARCH_YEARS = 400
MAX_JITTER_S = 86_400
# The stored form's longest: jobs/models/job.py, Schedule.cron (max_length).
MAX_TEXT = 200
ONE_MINUTE = timedelta(minutes=1)

_VALUE = r"[0-9]+|[A-Za-z]{3}"
_RANGE_RE = re.compile(rf"^(?:(\*)|({_VALUE})(?:-({_VALUE}))?)(?:/([0-9]+))?$")
_LAST_DOW_RE = re.compile(r"^([0-9]+)L$", re.IGNORECASE)
_HASHED_RE = re.compile(r"^H(?:\(|/|$)", re.IGNORECASE)
_NTH_DOW_RE = re.compile(rf"^({_VALUE})#([0-9]+)$")


@dataclass(frozen=True, eq=False)  # hashed by identity: ``parse`` caches one per text
class CronSpec:
    """A parsed five-field expression. ``text`` is the normalised expression; the sets hold
    the values each field allows (day of week 0-6, Sunday 0)."""

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    last_day: bool                          # L in day of month
    last_weekday: bool                      # LW in day of month
    months: tuple[int, ...]
    weekdays: frozenset[int]
    last_weekdays: frozenset[int]           # 5L: the last Friday of the month
    nth_weekdays: frozenset[tuple[int, int]]  # (5, 2) from 5#2: the second Friday
    day_or: bool      # both day fields restricted: either may match (cron(5))
    wall_clock: bool  # fixed-time job: neither minute nor hour starts with '*'

    def day_matches(self, day: date) -> bool:
        """Whether ``day`` satisfies the day-of-month and day-of-week fields (the month
        field is checked by the caller)."""
        return day.day in _month_days(self, day.year, day.month)


@lru_cache(maxsize=65_536)
def _month_days(spec: CronSpec, year: int, month: int) -> tuple[int, ...]:
    """The days of ``month`` of ``year`` that satisfy the two day fields of ``spec``."""
    first, length = calendar.monthrange(year, month)  # first: weekday of the 1st, Monday 0
    by_date = {d for d in spec.days if d <= length}
    if spec.last_day:
        by_date.add(length)
    if spec.last_weekday:
        by_date.add(length - max(0, (first + length - 1) % 7 - 4))
    by_weekday = set()
    for day in range(1, length + 1):
        weekday = (first + day) % 7  # Sunday 0, as cron counts
        if (weekday in spec.weekdays or (weekday in spec.last_weekdays and day + 7 > length)
                or (weekday, (day + 6) // 7) in spec.nth_weekdays):
            by_weekday.add(day)
    return tuple(sorted(by_date | by_weekday if spec.day_or else by_date & by_weekday))


def _bad(index: int, term: str, reason: str) -> ValueError:
    return ValueError(f"bad {FIELD_NAMES[index]} field {term!r}: {reason}")


def _value(index: int, field: str, token: str) -> int:
    low, high = BOUNDS[index]
    if token.isdigit():
        number = int(token)
        if not low <= number <= high:
            # The range even for a lone number: "bad minute field '61'" alone left a new
            # user guessing whether minutes count from 0 or 1.
            raise _bad(index, field, f"{number} is out of range {low}-{high}")
        return number
    names = NAMES[index]
    if names is None or token.upper() not in names:
        known = f" (names: {' '.join(names)})" if names else ""
        raise _bad(index, field, f"{token!r} is not a number{known}")
    return names[token.upper()]


def _term(index: int, field: str, term: str, spec: dict) -> None:
    """Add the values of one list item ``term`` of field ``index`` to ``spec``."""
    upper = term.upper()
    if index == 2 and upper in ("L", "LW"):
        spec["last_day" if upper == "L" else "last_weekday"] = True
        return
    if index == 4 and (match := _LAST_DOW_RE.match(term)):
        spec["last_weekdays"].add(_value(index, field, match.group(1)) % 7)
        return
    if index == 4 and (match := _NTH_DOW_RE.match(term)):
        nth = int(match.group(2))
        if not 1 <= nth <= 5:
            raise _bad(index, field, f"#{nth}: the week of the month must be 1-5")
        spec["nth_weekdays"].add((_value(index, field, match.group(1)) % 7, nth))
        return
    match = _RANGE_RE.match(term)
    if match is None:
        raise _bad(index, field, _why_not(index, term))
    star, first, last, step = match.groups()
    low, high = BOUNDS[index]
    start = low if star else _value(index, field, first)
    stop = high if star or (last is None and step) else start
    if last is not None:
        stop = _value(index, field, last)
        if stop < start:
            raise _bad(index, field, f"the range {first}-{last} runs backwards")
    stride = 1 if step is None else int(step)
    if stride < 1:
        raise _bad(index, field, "a step must be 1 or more")
    spec["values"].update(range(start, stop + 1, stride))


def _why_not(index: int, term: str) -> str:
    """A reason for a list item that matches no accepted form."""
    if term == "":
        return "an empty list item"
    if term == "?":
        return "'?' is not cron(5) syntax; use '*'"
    if _HASHED_RE.match(term):
        return "hashed 'H' values are not supported"
    if index == 2 and term.upper().endswith("W"):
        return "'W' (nearest weekday) is supported only as LW, the last weekday of the month"
    if "L" in term.upper() or "#" in term:
        where = {2: "L or LW", 4: "5L or 5#2"}.get(index)
        return f"only {where} is accepted here" if where else "L and # belong to the day fields"
    return "expected *, a number, a name, a range a-b or a step */n, a-b/n, a/n"


def _field(index: int, text: str) -> dict:
    spec = {"values": set(), "last_day": False, "last_weekday": False,
            "last_weekdays": set(), "nth_weekdays": set()}
    for term in text.split(","):
        _term(index, text, term, spec)
    return spec


@lru_cache(maxsize=4096)
def parse(expression: str) -> CronSpec:
    """Parse ``expression`` (five fields or a macro; whitespace-separated) into a CronSpec.

    Raises ValueError with a reason naming the bad field: an unknown macro, @reboot (there
    is no boot in a scheduler), a number of fields other than five (no seconds or year
    field), a value, name, range or step the field does not accept, or a day pattern that
    no date in the 400-year Gregorian cycle matches (e.g. February 30th). Cached.
    """
    text = " ".join(expression.split())
    lowered = text.lower()
    if lowered == "@reboot":
        raise ValueError("@reboot has no meaning here: the scheduler has no boot to run at")
    if text.startswith("@"):
        if lowered not in MACROS:
            raise ValueError(f"unknown macro {text!r} (known: {', '.join(MACROS)})")
        text = MACROS[lowered]
    fields = text.split(" ")
    if len(fields) != 5:
        extra = ("; a seconds or year field is not supported (runs are scheduled in whole "
                 "minutes)" if len(fields) in (6, 7) else "")
        raise ValueError(f"expected 5 fields (minute hour day-of-month month day-of-week), "
                         f"got {len(fields) if text else 0}{extra}")
    parts = [_field(i, f) for i, f in enumerate(fields)]
    dom, dow = parts[2], parts[4]
    spec = CronSpec(
        text=text,
        minutes=tuple(sorted(parts[0]["values"])),
        hours=tuple(sorted(parts[1]["values"])),
        days=frozenset(dom["values"]),
        last_day=dom["last_day"],
        last_weekday=dom["last_weekday"],
        months=tuple(sorted(parts[3]["values"])),
        weekdays=frozenset(v % 7 for v in dow["values"]),
        last_weekdays=frozenset(dow["last_weekdays"]),
        nth_weekdays=frozenset(dow["nth_weekdays"]),
        day_or=not (fields[2].startswith("*") or fields[4].startswith("*")),
        wall_clock=not (fields[0].startswith("*") or fields[1].startswith("*")),
    )
    if not _ever_matches(spec):
        raise ValueError(f"{expression!r} never fires: no date matches its day-of-month, "
                         f"month and day-of-week fields")
    return spec


def _ever_matches(spec: CronSpec) -> bool:
    # Uncached: 4,800 months of a pattern that never matches would only flood the cache.
    return any(_month_days.__wrapped__(spec, year, month)
               for year in range(2000, 2000 + SEARCH_YEARS) for month in spec.months)


def normalize(expression: str) -> str:
    """Return the five-field form of ``expression`` (macros expanded, blanks collapsed to
    one space, values as written). Raises ValueError as ``parse`` does, and when that
    form is longer than MAX_TEXT characters (the schedule's column: a valid list of every
    minute and hour reached the database and failed a workflow's creation with a 500)."""
    text = parse(expression).text
    if len(text) > MAX_TEXT:
        raise ValueError(f"a cron expression may have at most {MAX_TEXT} characters; this "
                         f"one has {len(text)} (a range or step, such as 0-59 or */5, says "
                         f"a long list in less)")
    return text


def zone(name: str) -> ZoneInfo:
    """The IANA timezone ``name``; raises ValueError for an unknown one."""
    if not isinstance(name, str):
        raise ValueError(f"a timezone is an IANA name such as Europe/Berlin, not {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # "America" is a folder
        raise ValueError(f"unknown IANA timezone {name!r}") from exc


def _walls(spec: CronSpec, start: datetime) -> Iterator[datetime]:
    """Naive local times at or after ``start`` (naive, whole minute) that match ``spec``,
    in order; ends after SEARCH_YEARS years without a matching day, or before year 9999
    (whose last hours have no UTC equivalent in zones west of Greenwich)."""
    year, month, first_day = start.year, start.month, start.day
    quiet_until = year + SEARCH_YEARS
    while year < min(quiet_until + 1, MAXYEAR):
        if month in spec.months:
            for day in _month_days(spec, year, month):
                if day < first_day:
                    continue
                quiet_until = year + SEARCH_YEARS
                hour_from, minute_from = (start.hour, start.minute) if day == first_day \
                    else (0, 0)
                for hour in spec.hours[bisect_left(spec.hours, hour_from):]:
                    minutes = spec.minutes
                    if hour == hour_from:
                        minutes = minutes[bisect_left(minutes, minute_from):]
                    for minute in minutes:
                        yield datetime(year, month, day, hour, minute)
        first_day = 0
        month, year = (month + 1, year) if month < 12 else (1, year + 1)


def _gap_end(wall: datetime, tz: ZoneInfo) -> datetime:
    """The first whole minute at or after ``wall`` (naive, inside a gap) that exists."""
    while tz.utcoffset(wall) < tz.utcoffset(wall.replace(fold=1)):
        wall += ONE_MINUTE
    return wall


def iter_after(expression: str, tz: str, after: datetime) -> Iterator[datetime]:
    """Occurrences of ``expression`` in timezone ``tz`` (IANA name) strictly after
    ``after`` (aware datetime), in order, as aware UTC datetimes; ends only after
    SEARCH_YEARS years without a match, or before year 9999.

    Raises ValueError for a bad expression, an unknown timezone or a naive ``after``.
    """
    spec, zone_info = parse(expression), zone(tz)
    if after.tzinfo is None:
        raise ValueError("after must be an aware datetime (naive datetimes are ambiguous)")
    local = after.astimezone(zone_info)
    start = local.replace(tzinfo=None, second=0, microsecond=0, fold=0)
    shift = zone_info.utcoffset(start) - zone_info.utcoffset(start.replace(fold=1))
    if spec.wall_clock:
        return _fixed_time(spec, zone_info, start, after.astimezone(UTC))
    if local.fold == 0 and shift > timedelta(0):
        # ``after`` lies in the first pass of an overlap: the second pass of the local
        # times just before it is still to come.
        start -= shift
    return _real_time(spec, zone_info, start, after.astimezone(UTC))


def _fixed_time(spec: CronSpec, tz: ZoneInfo, start: datetime,
                after: datetime) -> Iterator[datetime]:
    # Local time -> instant is non-decreasing here (gap times map to the gap's end,
    # repeated times to their first pass), so nothing before ``start`` can lie after
    # ``after``, and equal instants are adjacent.
    last = after
    for wall in _walls(spec, start):
        offset = tz.utcoffset(wall)
        if offset < tz.utcoffset(wall.replace(fold=1)):  # skipped by a spring-forward gap
            wall = _gap_end(wall, tz)
            offset = tz.utcoffset(wall)
        instant = (wall - offset).replace(tzinfo=UTC)
        if instant > last:
            last = instant
            yield instant


def _real_time(spec: CronSpec, tz: ZoneInfo, start: datetime,
               after: datetime) -> Iterator[datetime]:
    # Walls are visited in local order; a repeated local time's second instant is held
    # back until no later wall can produce an earlier instant (first passes are
    # non-decreasing, and every second pass lies after its own first).
    last, held = after, []
    for wall in _walls(spec, start):
        first_offset, second_offset = tz.utcoffset(wall), tz.utcoffset(wall.replace(fold=1))
        if first_offset < second_offset:  # skipped by a spring-forward gap: never happens
            continue
        instant = (wall - first_offset).replace(tzinfo=UTC)
        while held and held[0] <= instant:
            earlier = heappop(held)
            if earlier > last:
                last = earlier
                yield earlier
        if instant > last:
            last = instant
            yield instant
        if first_offset > second_offset:
            heappush(held, (wall - second_offset).replace(tzinfo=UTC))
    while held:
        earlier = heappop(held)
        if earlier > last:
            last = earlier
            yield earlier


def next_after(expression: str, tz: str, after: datetime) -> datetime:
    """The first occurrence strictly after ``after`` (aware), as an aware UTC datetime.

    Raises ValueError for a bad expression or timezone, or when no occurrence is left
    before year 9999."""
    for instant in iter_after(expression, tz, after):
        return instant
    raise ValueError(f"{expression!r} has no occurrence after {after.isoformat()}")


def occurrences(expression: str, tz: str, first: datetime, until: datetime,
                limit: int = 10_000) -> list[datetime]:
    """Occurrences at or after ``first`` and at or before ``until`` (aware datetimes), at
    most ``limit``, as aware UTC datetimes in order."""
    found = []
    for instant in iter_after(expression, tz, first - timedelta(microseconds=1)):
        if instant > until or len(found) >= limit:
            break
        found.append(instant)
    return found


def jitter_offset(job_id: int, jitter_s: float) -> float:
    """The job's fixed start delay in seconds, in [0, jitter_s], rounded to milliseconds.

    Derived from a hash of ``job_id`` (not random), so a job keeps the same offset at every
    occurrence and across scheduler restarts, while many jobs due at the same minute spread
    evenly over the window (docs/cron.md, "Jitter")."""
    if jitter_s <= 0:
        return 0.0
    digest = hashlib.blake2b(str(job_id).encode(), digest_size=8).digest()
    return round(int.from_bytes(digest) / 2**64 * jitter_s, 3)
