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


def bench(*options: str) -> str:
    """The output of bench/redis_cpu.py run on 400 runs with ``options``."""
    env = {**os.environ, "DATABASE_URL": database_url("default"),
           "DJANGO_SETTINGS_MODULE": "scheduler_project.settings",  # as run by hand
           "SCHEDULER_REDIS_PREFIX": f"{os.environ['SCHEDULER_REDIS_PREFIX']}bench"}
    out = subprocess.run([sys.executable, "bench/redis_cpu.py", "--runs", "400", "--batch",
                          "16", "--repeat", "1", *options], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_the_bench_reports_redis_cpu_per_lease_and_ack_of_every_run():
    out = bench()
    figures = dict(re.findall(r"^  (push|lease|ack) +([\d.]+) µs", out, re.M))
    assert set(figures) == {"push", "lease", "ack"}, out
    assert all(float(us) > 0 for us in figures.values())
    assert "runs/s" in out


@pytest.mark.slow
def test_on_a_cluster_the_bench_shows_a_spread_queues_work_on_every_master(
        redis_cluster_url):
    out = bench("--url", redis_cluster_url, "--shards", "3", "--spread")
    [shares] = re.findall(r"CPU by master: (.*?);", out)
    percents = [int(share) for share in re.findall(r"(\d+)%", shares)]
    assert len(percents) == 3, out
    assert max(percents) < 90, out  # unspread, one master does nearly all of it


def test_a_queue_needs_as_many_slots_as_its_redis_cpu_fills_cores_at_70_percent():
    assert queue_slots(1000, 11.4) == 1
    assert queue_slots(61_000, 11.4) == 1  # 0.70 of a core
    assert queue_slots(62_000, 11.4) == 2
    assert queue_slots(200_000, 11.4) == 4  # 2.28 cores at 70%: 3.26, so 4
