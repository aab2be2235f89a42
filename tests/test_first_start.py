"""The first start tells a newcomer it is installing, not hanging: scripts/ensure-venv
prints a line every PROGRESS_S seconds while pip runs (docs/demo.md, "How
long"). The pip here is a stand-in that takes a few seconds, since a real install
would make the test minutes long; the script under test is the real one."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SLOW_PIP = """#!/usr/bin/env bash
# -m pip install --upgrade pip: done at once; the project's install: say what pip says,
# slowly (over PROGRESS_S=1 by 2 s, room for a loaded machine)
case "$*" in *--upgrade*) exit 0 ;; esac
echo "Collecting django"
sleep 2
echo "Collecting djangorestframework"
sleep 1
"""


def test_ensure_venv_reports_progress_while_pip_installs(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "ensure-venv", tmp_path / "scripts" / "ensure-venv")
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "requirements.lock").write_text("")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(SLOW_PIP)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)

    done = subprocess.run(["bash", "scripts/ensure-venv"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PROGRESS_S": "1"})

    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stderr.splitlines() if "still installing after" in line]
    assert progress, done.stderr
    assert "packages resolved" in progress[-1]
    assert "installed in" in done.stderr.splitlines()[-1]
    assert (tmp_path / ".venv" / ".installed").exists()
