"""runworker's --help, the Procfile and runall agree on a worker's concurrency, and the
help says where the default comes from (docs/architecture.md, "runworker")."""

import re
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs.management.commands.runall import Command as RunAll
from runs.worker.main import default_concurrency
from tests.conftest import ROOT


def _help(command: str) -> str:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), command, "--help"],
                          capture_output=True, text=True, check=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"}).stdout


def test_runworker_help_gives_the_default_the_procfile_uses():
    procfile = (ROOT / "Procfile").read_text()
    procfile_default = int(re.search(r"WORKER_CONCURRENCY:-(\d+)", procfile).group(1))
    text = " ".join(_help("runworker").split())
    said = int(re.search(r"WORKER_CONCURRENCY, else (\d+)", text).group(1))
    assert said == procfile_default
    parser = RunAll().create_parser("manage.py", "runall")
    assert parser.get_default("concurrency") is None  # runworker's default, not its own


def test_the_default_comes_from_worker_concurrency(monkeypatch):
    monkeypatch.delenv("WORKER_CONCURRENCY", raising=False)
    procfile = (ROOT / "Procfile").read_text()
    assert default_concurrency() == int(re.search(r"WORKER_CONCURRENCY:-(\d+)",
                                                  procfile).group(1))
    monkeypatch.setenv("WORKER_CONCURRENCY", "7")
    assert default_concurrency() == 7
    monkeypatch.setenv("WORKER_CONCURRENCY", "many")
    with pytest.raises(CommandError, match="WORKER_CONCURRENCY='many'"):
        call_command("runworker", "--burst")
