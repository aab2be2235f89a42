"""The crontab parser (jobs/schedules/crontab_files.py): pure Python, no database."""

import re
import textwrap
from pathlib import Path

import pytest

from jobs.schedules.crontab_files import detect_system, parse_crontab, parse_file

DEMO = Path(__file__).resolve().parents[1] / "jobs" / "demo.crontab"


def parse(text: str, **kwargs):
    return parse_crontab(textwrap.dedent(text).lstrip("\n"), **kwargs)


def test_user_crontab_fields_command_and_line_numbers():
    result = parse("""
        # comment

        */5 * * * *\t/usr/bin/backup   --fast  >/dev/null 2>&1
        0\t3  * * 1-5 echo "a  b"
    """)
    assert not result.system and not result.errors
    first, second = result.entries
    assert (first.line_number, first.schedule, first.command, first.user) == (
        3, "*/5 * * * *", "/usr/bin/backup   --fast  >/dev/null 2>&1", None)
    assert (second.line_number, second.schedule, second.command) == (4, "0 3 * * 1-5",
                                                                      'echo "a  b"')
    assert second.timezone == "UTC"


def test_env_lines_are_not_jobs_and_quotes_and_spaces_are_accepted():
    result = parse("""
        SHELL=/bin/bash
        PATH=/usr/local/bin:/usr/bin
        MAILTO=""
        KOHA_CRON_PATH = /usr/share/koha/bin/cronjobs
        PHP="/usr/bin/php"
        0 * * * * $KOHA_CRON_PATH/fines.pl
    """)
    assert not result.errors
    assert [(e.line_number, e.command) for e in result.entries] == [
        (6, "$KOHA_CRON_PATH/fines.pl")]
    assert result.entries[0].timezone == "UTC"


def test_cron_tz_and_tz_set_the_timezone_of_following_lines():
    result = parse("""
        0 9 * * * a
        CRON_TZ=Europe/Berlin
        30 9 * * 1-5 b
        TZ="America/New_York"
        0 12 * * * c
        CRON_TZ=
        0 0 * * * d
    """)
    assert not result.errors
    assert [(e.command, e.timezone) for e in result.entries] == [
        ("a", "UTC"), ("b", "Europe/Berlin"), ("c", "America/New_York"), ("d", "UTC")]


def test_unknown_timezone_is_reported_on_its_line_and_on_the_lines_it_governs():
    result = parse("""
        CRON_TZ=Mars/Olympus
        0 9 * * * a
        CRON_TZ=Asia/Tokyo
        0 9 * * * b
    """)
    assert [(e.line_number, "Mars/Olympus" in e.reason) for e in result.errors] == [
        (1, True), (2, True)]
    assert "line 1" in result.errors[1].reason
    assert [(e.command, e.timezone) for e in result.entries] == [("b", "Asia/Tokyo")]


def test_system_crontab_with_user_column():
    result = parse("""
        SHELL=/bin/sh
        17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly
        */5 * * * * www-data php /usr/share/cacti/site/poller.php
        @hourly    www-data   /usr/share/mailman3-web/manage.py runjobs hourly
    """)
    assert result.system and not result.errors
    assert [(e.schedule, e.user, e.command) for e in result.entries] == [
        ("17 * * * *", "root", "cd / && run-parts --report /etc/cron.hourly"),
        ("*/5 * * * *", "www-data", "php /usr/share/cacti/site/poller.php"),
        ("@hourly", "www-data", "/usr/share/mailman3-web/manage.py runjobs hourly"),
    ]


@pytest.mark.parametrize("lines, system", [
    (["0 * * * * root /bin/true"], True),                 # a well-known account
    (["0 * * * * debian-mirror /bin/update"], True),      # Debian's system-account prefix
    (["0 * * * * zimbra zmbackup -f", "@daily zimbra zmbackup -i"], True),
    (["0 * * * * aplay /home/me/intro.wav"], False),      # one line, unknown word: user
    (["0 * * * * python3 a.py", "*/2 * * * * python3 b.py"], False),  # a known command
    (["0 * * * * pg_dump shop", "5 * * * * no x", "0 * * * * also y"], False),  # all differ
    (["0 * * * * run-parts /etc/hourly", "0 2 * * * /app/renew.sh"], False),
    (["@daily /usr/local/bin/letsencrypt renew"], False),  # /etc/crontab without users
    (["0 7 * * * reboot"], False),                        # no room for a user column
    ([], False),
])
def test_detect_system(lines, system):
    assert detect_system(lines) is system


def test_system_flag_overrides_the_guess():
    forced = parse("0 * * * * aplay /home/me/intro.wav\n", system=True)
    assert forced.entries[0].user == "aplay"
    refused = parse("0 * * * * /bin/true x\n", system=True)
    assert not refused.entries and "user column" in refused.errors[0].reason
    missing = parse("0 * * * * root\n", system=True)
    assert "needs a user and a command" in missing.errors[0].reason


def test_parse_file_treats_etc_crontab_and_cron_d_as_system(tmp_path, monkeypatch):
    path = tmp_path / "tab"
    path.write_text("0 * * * * aplay /home/me/intro.wav\n")
    assert parse_file(path).entries[0].user is None
    assert parse_file(path, system=True).entries[0].user == "aplay"
    monkeypatch.setattr(Path, "read_text", lambda self, **kw: "0 * * * * aplay /x.wav\n")
    for where in ("/etc/crontab", "/etc/cron.d/sound"):
        assert parse_file(where).entries[0].user == "aplay"
        assert parse_file(where, system=False).entries[0].user is None


def test_macros_are_kept_as_written():
    result = parse("""
        @yearly a
        @annually b
        @monthly c
        @weekly d
        @daily e
        @midnight f
        @hourly g
        @DAILY h
    """)
    assert not result.errors
    assert [e.schedule for e in result.entries] == [
        "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
        "@DAILY"]


def test_reboot_and_unknown_macros_are_refused_not_raised():
    result = parse("""
        @reboot /usr/sbin/logrotate /etc/pihole/logrotate
        @every 5m /bin/true
        @daily /bin/true
    """)
    assert [e.command for e in result.entries] == ["/bin/true"]
    (reboot, every) = result.errors
    assert reboot.line_number == 1 and "@reboot" in reboot.reason
    assert every.line_number == 2 and "unknown macro '@every'" in every.reason


@pytest.mark.parametrize("line, reason", [
    ("61 * * * * /bin/true", "bad minute field '61'"),
    ("0 25 * * * /bin/true", "bad hour field '25'"),
    ("0 0 32 * * /bin/true", "bad day of month field '32'"),
    ("0 0 * 13 * /bin/true", "bad month field '13'"),
    ("0 0 * * 8 /bin/true", "bad day of week field '8'"),
    ("?  6  *  *  *\t/usr/etc/daily cron", "bad minute field '?'"),
    ("This cron job will play the intro", "bad minute field 'This'"),
    (";DIR=/usr/websites/scripts", "expected 5 fields"),
    ("0 0 * * *", "no command"),
    ("*/6 * * * * * echo six fields", "command starts with '*'"),
    ("30 7 * * 2 - 5 /root/wifi/wifion.sh", "command starts with '-'"),
    ("0 0 31 2 * /bin/never", "never fires"),
])
def test_bad_line_is_reported_with_its_line_number(line, reason):
    result = parse(f"# header\n0 * * * * /bin/ok\n{line}\n30 * * * * /bin/ok\n")
    assert [e.line_number for e in result.entries] == [2, 4]
    assert len(result.errors) == 1
    assert result.errors[0].line_number == 3
    assert reason in result.errors[0].reason


def test_names_come_from_the_comment_lines_right_above():
    result = parse("""
        # Nightly backup
        #   of the shop database
        30 2 * * * pg_dump shop
        5 * * * * no comment here

        # detached comment

        0 * * * * also none
        # env comment
        MAILTO=ops@example.com
        0 1 * * * after env
    """)
    assert [(e.command, e.comment) for e in result.entries] == [
        ("pg_dump shop", "Nightly backup of the shop database"),
        ("no comment here", ""), ("also none", ""), ("after env", "")]


def test_day_names_leading_zeros_ranges_with_steps_and_dow_7_are_valid():
    result = parse("""
        25 11 * * TUE,FRI a
        00 01 * * * b
        5-55/10 * * * * c
        47 6 * * 7 d
        09,39 * * * * e
    """)
    assert not result.errors and len(result.entries) == 5


def test_percent_and_trailing_whitespace_in_commands():
    result = parse("0 3 * * * backup-`date '+\\%Y-\\%m-\\%d'`.log  \n")
    assert result.entries[0].command == "backup-`date '+\\%Y-\\%m-\\%d'`.log"


def test_demo_crontab_is_valid_and_has_what_the_readme_promises():
    result = parse_file(DEMO)
    assert not result.errors and not result.system
    schedules = [e.schedule for e in result.entries]
    assert schedules.count("* * * * *") >= 3
    assert "@daily" in schedules and any(s.startswith("*/5") for s in schedules)
    berlin = [e for e in result.entries if e.timezone == "Europe/Berlin"]
    assert [e.schedule for e in berlin] == ["30 9 * * 1-5"]
    assert all(e.comment for e in result.entries)


CRONTABS = Path(__file__).resolve().parent / "data" / "crontabs"  # README.md there: sources


def corpus_rows() -> list[tuple[str, int, str]]:
    """(file, schedule lines, features) of each row of the corpus' README table (columns:
    file, source, schedule lines, syntax features, licence)."""
    rows = []
    for line in (CRONTABS / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 5 and cells[0].endswith(".crontab"):
            rows.append((cells[0], int(cells[2].split()[0]), cells[3]))
    return rows


def test_every_corpus_file_has_a_readme_row_naming_its_source_and_a_shipped_licence():
    readme = (CRONTABS / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 5 and cells[0].endswith(".crontab"):
            rows[cells[0]] = cells

    assert set(rows) == {p.name for p in CRONTABS.glob("*.crontab")}
    for name, (_, source, _, _, licence) in rows.items():
        assert (CRONTABS / name).read_text().startswith("# source: "), name
        shipped = re.findall(r"LICENSES/[\w./-]+\w", licence)
        assert shipped and all((CRONTABS / path).is_file() for path in shipped), (name, licence)
        assert source, name


@pytest.mark.parametrize("name, schedule_lines, features", corpus_rows())
def test_real_crontab_agrees_with_the_corpus_annotations(name, schedule_lines, features):
    """Every schedule line of the README's count is an entry or an error; the format guess
    matches its "user column" tag; every flagged line is an error, except the /etc/crontab
    files written without a user column, which read fine as user crontabs."""
    result = parse_file(CRONTABS / name)
    assert len(result.entries) + len(result.errors) == schedule_lines
    if schedule_lines:
        assert result.system == ("user column" in features.split(", "))
    flagged = [int(n) for n, why in re.findall(r"L(\d+) ([^;]+)", features)
               if "in a system crontab the user column" not in why]
    assert set(flagged) <= {e.line_number for e in result.errors}
