"""What a daemon imports at its start: a worker that never sends an http request, nor
validates an http job, loads neither httpx nor cryptography.fernet (redis-py imports the
bare cryptography package, for its version); docs/performance.md, "A worker's start".
Each check is a fresh interpreter with the production settings."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys
import django
django.setup()
import runs.management.commands.runworker  # noqa: F401
from jobs.validation import validate_job
validate_job({"name": "n", "handler": "noop", "payload": {}})
print(json.dumps(sorted(m for m in ("httpx", "httpcore", "cryptography.fernet", "rich")
                        if m in sys.modules)))
"""


def loaded_at_start(extra: str = "") -> list[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "scheduler_project.settings",
           "DEBUG": "true", "SCHEDULER_DEMO_HANDLERS": "true"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    done = subprocess.run([sys.executable, "-c", PROBE + extra], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_worker_start_loads_no_http_client_nor_cipher():
    assert loaded_at_start() == []


def test_the_http_handler_still_loads_them_when_an_http_job_is_validated():
    # The probe itself would pass if the modules were simply never used: an http job's
    # validation must still reach them.
    extra = ("validate_job({'name': 'h', 'handler': 'http', "
             "'payload': {'url': 'https://example.com/'}})\n"
             "print(json.dumps(sorted(m for m in ('httpx', 'cryptography.fernet') "
             "if m in sys.modules)))\n")
    assert loaded_at_start(extra) == ["cryptography.fernet", "httpx"]
