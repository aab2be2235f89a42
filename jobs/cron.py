"""Cron expressions in an IANA timezone, evaluated with croniter.

Five fields (minute hour day-of-month month day-of-week, cron(5)) or one of the macros
@yearly @annually @monthly @weekly @daily @midnight @hourly. Occurrences are computed in
the schedule's timezone and returned as aware UTC datetimes.
"""

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

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


def normalize(expression: str) -> str:
    """Return the five-field form of ``expression`` (macros expanded, spaces collapsed).

    Raises ValueError naming the problem: @reboot (no boot in a scheduler), a wrong number
    of fields, or the first field croniter rejects.
    """
    text = " ".join(expression.split())
    if text.lower() == "@reboot":
        raise ValueError("@reboot has no meaning here: the scheduler has no boot to run at")
    text = MACROS.get(text.lower(), text)
    fields = text.split(" ")
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day month weekday), got {len(fields)}")
    if not croniter.is_valid(text):
        for i, name in enumerate(FIELD_NAMES):
            probe = ["*"] * 5
            probe[i] = fields[i]
            if not croniter.is_valid(" ".join(probe)):
                raise ValueError(f"bad {name} field {fields[i]!r}")
        raise ValueError(f"invalid cron expression {expression!r}")
    try:
        croniter(text, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadCronError, CroniterBadDateError) as exc:
        raise ValueError(f"{expression!r} never fires (e.g. February 31st)") from exc
    return text


def zone(name: str) -> ZoneInfo:
    """The IANA timezone ``name``; raises ValueError for an unknown one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown IANA timezone {name!r}") from exc


def next_after(expression: str, tz: str, after: datetime) -> datetime:
    """The first occurrence strictly after ``after`` (aware), as an aware UTC datetime."""
    local = after.astimezone(zone(tz))
    try:
        nxt = croniter(normalize(expression), local).get_next(datetime)
    except (CroniterBadCronError, CroniterBadDateError) as exc:
        raise ValueError(str(exc)) from exc
    return nxt.astimezone(UTC)


def occurrences(expression: str, tz: str, first: datetime, until: datetime,
                limit: int = 10_000) -> list[datetime]:
    """Occurrences from ``first`` (itself an occurrence, included) up to ``until``
    (included), at most ``limit``, as aware UTC datetimes in order."""
    found = []
    moment = first
    while moment <= until and len(found) < limit:
        found.append(moment)
        moment = next_after(expression, tz, moment)
    return found
