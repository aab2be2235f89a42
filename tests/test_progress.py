"""Long commands show a progress bar on a terminal and nothing of it elsewhere
(scheduler_core/progress.py): importcrontab, prunehistory, loaddemo, deadletter."""

import os
import pty
import subprocess
import sys

import pytest

from tests.conftest import ROOT, daemon_env

pytestmark = pytest.mark.django_db(transaction=True)


def _crontab(tmp_path, lines: int = 200):
    path = tmp_path / "big.crontab"
    path.write_text("".join(f"{i % 60} * * * * /bin/task-{i}\n" for i in range(lines)))
    return path


def _on_a_terminal(argv: list[str], env: dict) -> str:
    """Run ``manage.py argv`` with its stdout on a pseudo-terminal; its output."""
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *argv], env=env,
                            stdout=child, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    with proc.stderr:
        errors = proc.stderr.read()
    assert proc.wait(60) == 0, errors
    return b"".join(chunks).decode(errors="replace")


def test_importcrontab_shows_progress_on_a_terminal_only(tmp_path):
    env = {**daemon_env("database"), "TERM": "xterm", "COLUMNS": "100"}
    argv = ["importcrontab", str(_crontab(tmp_path)), "--handler", "echo"]

    shown = _on_a_terminal(argv, env)
    assert "importing big.crontab" in shown
    assert "Created 200 cron jobs" in shown

    piped = subprocess.run([sys.executable, str(ROOT / "manage.py"), *argv, "--dry-run"],
                           env=env, capture_output=True, text=True, cwd=ROOT, check=True)
    assert "importing" not in piped.stdout and "\x1b[" not in piped.stdout
    assert "Would create 200 cron jobs" in piped.stdout


def test_deadletter_requeue_shows_progress_on_a_terminal():
    env = {**daemon_env("database"), "TERM": "xterm", "COLUMNS": "100"}
    from tests.test_api_helpers import finished_run, one_off

    job = one_off(None)
    for _ in range(3):
        finished_run(job)
    shown = _on_a_terminal(["deadletter", "requeue"], env)
    assert "requeue dead runs" in shown
    assert "3 of 3 dead runs requeued." in shown
