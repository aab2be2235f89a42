"""Which timezones a new schedule may name, and why a stored schedule no longer reads
(docs/cron.md, "Timezones and daylight saving").

A new schedule's zone must be one of ``zoneinfo.available_timezones()`` whose meaning does
not depend on the host: ``localtime`` is whatever zone the host is set to and ``Factory``
a placeholder for "not set", so a job in either would fire at other times on another
machine. A schedule stored before a rule existed, or before the tz database lost its zone,
is reported per field with what to edit, instead of failing with a 500 where it is read.
"""

from functools import cache
from zoneinfo import available_timezones

from jobs.schedules import cron

# In available_timezones() on most hosts, but meaning a different zone on each.
HOST_ZONES = frozenset({"localtime", "Factory", "posixrules"})


@cache
def known_zones() -> frozenset[str]:
    """The IANA names a new schedule may use (read once per process)."""
    return frozenset(available_timezones()) - HOST_ZONES


def zone_problem(name) -> str | None:
    """Why ``name`` cannot be a new schedule's timezone, or None."""
    if isinstance(name, str) and name in HOST_ZONES:
        return (f"timezone {name!r} means a different zone on each host; give an IANA "
                "name such as Europe/Berlin or UTC")
    if not isinstance(name, str) or name not in known_zones():
        return f"unknown IANA timezone {name!r}"
    return None


def stored_problems(expression: str, tz: str, prefix: str = "",
                    remedy: str = "edit it first") -> dict[str, str]:
    """{field: why} for a stored schedule (cron ``expression``, zone ``tz``) that no
    longer reads here, each field named ``prefix`` + ``cron`` or ``timezone`` and the
    reason ending in ``remedy``; empty when both read. Never raises."""
    problems = {}
    try:
        cron.parse(expression)
    except (ValueError, TypeError) as exc:
        problems[f"{prefix}cron"] = (f"the stored cron {expression!r} no longer reads "
                                     f"({exc}); {remedy}")
    try:
        cron.zone(tz)
    except ValueError:
        problems[f"{prefix}timezone"] = (f"the stored timezone {tz!r} is not in this "
                                         f"host's tz database; {remedy}")
    return problems
