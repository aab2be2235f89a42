"""Parse crontab files (crontab(5)) into cron job entries and per-line errors.

Line kinds, as cron(5) defines them: blank lines and lines whose first non-blank character
is ``#`` (comments; never trailing a job) are ignored; ``NAME = value`` lines set the
environment (blanks around ``=`` allowed, the value may be quoted with matching ``'`` or
``"``); every other line is a job: five time fields or a macro (``@daily`` ...), in a
system crontab a user name, then the command (the rest of the line, ``%`` kept as written).
``CRON_TZ=`` and ``TZ=`` set the timezone of the lines that follow (default UTC; an empty
value resets it); ``SHELL=``, ``PATH=``, ``MAILTO=`` and the rest are plain environment.

System or user format (the user column exists only in /etc/crontab and /etc/cron.d files):
``parse_file`` takes that from the path when it says so; otherwise ``detect_system`` looks
at the word after the schedule of every job line. The file is a system crontab when each
such word is shaped like a user name (letters, digits, ``_ . -``, optional trailing ``$``,
or an ``__INSTALL_PLACEHOLDER__``), is not a common command or shell word (cd, test, sh,
python3, run-parts ...), is followed by a command, and either a well-known system account
(root, www-data, nobody, debian-* ...) is among them or the same few names repeat (at
most half as many distinct words as lines, as a service account does). A user crontab
whose lines all start with one unusual bare command (``backup-tool ...``) is thus misread
as a system crontab; pass ``system=`` (``loaddemo --format``) when the guess is wrong.

Lines rejected (reported with their number, never raised): a schedule
``jobs.schedules.cron.normalize`` refuses (including ``@reboot``), an unknown macro or
timezone, a schedule that never fires, a missing command or user, and a command whose
first word looks like another time field (``*``, ``-``, ``0,30``: a seconds-first
six-field line or a stray blank inside a field).
"""

import re
from dataclasses import dataclass
from pathlib import Path

from jobs.schedules import cron

ENV_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
USER_RE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_.-]*\$?|__[A-Z0-9_]+__)$")
TIME_WORD_RE = re.compile(r"^[0-9*?/,-]+$")
COMMAND_WORDS = frozenset(
    "cd test [ [[ if for while case exec eval source . env nice ionice sudo su sh bash dash "
    "zsh ksh python python3 perl php ruby node java run-parts date reboot shutdown find "
    "crontab echo printf sleep curl wget flock timeout nohup time true false cat mail rm cp "
    "mv tar rsync git docker make logger systemctl service".split()
)
SYSTEM_ACCOUNTS = frozenset(
    "root daemon bin sys adm nobody operator www www-data news uucp mail postfix backup "
    "list proxy lp man games".split()
)


@dataclass(frozen=True)
class CronEntry:
    """One job line: ``schedule`` is the five fields joined by one space, or the macro."""

    line_number: int
    schedule: str
    command: str
    user: str | None
    timezone: str
    comment: str


@dataclass(frozen=True)
class LineError:
    line_number: int
    reason: str


@dataclass(frozen=True)
class Crontab:
    entries: list[CronEntry]
    errors: list[LineError]
    system: bool


def _job_words(lines: list[str]):
    """Yield the words of each line that is neither blank, comment nor environment."""
    for raw in lines:
        line = raw.strip()
        if line and not line.startswith("#") and not ENV_RE.match(line):
            yield line.split()


def detect_system(lines: list[str]) -> bool:
    """Guess whether ``lines`` (str list, one per crontab line) form a system crontab with
    a user column (crontab(5), "/etc/crontab"); the heuristic is in the module docstring.
    Never raises."""
    users = []
    for words in _job_words(lines):
        width = 1 if words[0].startswith("@") else 5
        if width == 5:
            try:
                cron.normalize(" ".join(words[:5]))
            except ValueError:
                continue
        users.append(words[width] if len(words) > width + 1 else None)
    if not users or not all(u and USER_RE.match(u) and u not in COMMAND_WORDS for u in users):
        return False
    if any(u in SYSTEM_ACCOUNTS or u.startswith(("debian-", "__")) for u in users):
        return True
    return len(users) >= 2 and 2 * len(set(users)) <= len(users)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _entry(number: int, line: str, system: bool, tz: str, comment: str) -> CronEntry:
    words = line.split()
    macro = words[0].startswith("@")
    if macro and words[0].lower() not in cron.MACROS and words[0].lower() != "@reboot":
        raise ValueError(f"unknown macro {words[0]!r} (known: {', '.join(cron.MACROS)})")
    width = 1 if macro else 5
    schedule = " ".join(words[:width])
    cron.normalize(schedule)  # ValueError naming the bad field, or refusing @reboot
    rest = line.split(None, width + int(system))[width:]
    user = None
    if system:
        if len(rest) < 2:
            raise ValueError("system crontab line needs a user and a command after the schedule")
        user = rest.pop(0)
        if not USER_RE.match(user):
            raise ValueError(f"{user!r} in the user column is not a user name")
    if not rest:
        raise ValueError("no command after the schedule")
    command = rest[0]
    first = command.split()[0]
    if TIME_WORD_RE.match(first):
        raise ValueError(f"command starts with {first!r}, which looks like one more time field "
                         "(six-field or seconds-first cron is not supported)")
    return CronEntry(number, schedule, command, user, tz, comment)


def parse_crontab(text: str, system: bool | None = None) -> Crontab:
    """Parse crontab ``text`` (str, the whole file) following crontab(5) and cron(5).

    ``system``: True for the system format with a user column (/etc/crontab, /etc/cron.d),
    False for a user crontab, None to guess with ``detect_system``. Returns a Crontab whose
    ``entries`` are the valid job lines (timezone an IANA name, "UTC" unless CRON_TZ/TZ set
    one; comment the ``#`` lines right above, joined by spaces) and whose ``errors`` give
    the line number (1-based) and reason of each rejected line. Never raises for bad lines.
    """
    lines = text.splitlines()
    if system is None:
        system = detect_system(lines)
    entries: list[CronEntry] = []
    errors: list[LineError] = []
    tz, tz_error, comments = "UTC", "", []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            comments = comments + [line.lstrip("#").strip()] if line else []
            continue
        comment, comments = " ".join(c for c in comments if c), []
        env = ENV_RE.match(line)
        if env:
            if env.group(1) in ("CRON_TZ", "TZ"):
                tz, tz_error = _unquote(env.group(2)) or "UTC", ""
                try:
                    cron.zone(tz)
                except ValueError as exc:
                    tz_error = f"{exc} (set on line {number})"
                    errors.append(LineError(number, str(exc)))
            continue
        try:
            if tz_error:
                raise ValueError(tz_error)
            entries.append(_entry(number, line, system, tz, comment))
        except ValueError as exc:
            errors.append(LineError(number, str(exc)))
    return Crontab(entries, errors, system)


def parse_file(path: str | Path, system: bool | None = None) -> Crontab:
    """Read and parse the crontab file at ``path`` (UTF-8, undecodable bytes replaced).

    A path of /etc/crontab or under /etc/cron.d/ is a system crontab unless ``system`` says
    otherwise (cron(8)); else see ``parse_crontab``. Raises OSError if it cannot be read.
    """
    path = Path(path)
    where = str(path.absolute())
    if system is None and (where == "/etc/crontab" or where.startswith("/etc/cron.d/")):
        system = True
    return parse_crontab(path.read_text(encoding="utf-8", errors="replace"), system)
