"""bench/redis_cpu.py measures the Redis CPU a lease and an ack cost, and
bench/capacity_model.py's queue_slots turns it into the masters a queue needs
(docs/scaling.md, "One queue over several masters")."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, database_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from capacity_model import queue_slots  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_bench_reports_redis_cpu_per_lease_and_ack_of_every_run():
    env = {**os.environ, "DATABASE_URL": database_url("default"),
           "DJANGO_SETTINGS_MODULE": "scheduler_project.settings"}  # as run by hand
    out = subprocess.run([sys.executable, "bench/redis_cpu.py", "--runs", "400", "--batch",
                          "16", "--repeat", "1"], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = dict(re.findall(r"^  (push|lease|ack) +([\d.]+) µs", out.stdout, re.M))
    assert set(figures) == {"push", "lease", "ack"}, out.stdout
    assert all(float(us) > 0 for us in figures.values())
    assert "runs/s" in out.stdout


def test_a_queue_needs_as_many_slots_as_its_redis_cpu_fills_cores_at_70_percent():
    assert queue_slots(1000, 11.4) == 1
    assert queue_slots(61_000, 11.4) == 1  # 0.70 of a core
    assert queue_slots(62_000, 11.4) == 2
    assert queue_slots(200_000, 11.4) == 4  # 2.28 cores at 70%: 3.26, so 4
