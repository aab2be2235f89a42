"""The short version of every fault scenario (docs/reliability.md): real daemons, a private
redis-server, the test database; each fails if any invariant breaks. Plus the checker
itself, shown to fail on a lost occurrence and on an unexplained duplicate execution."""

import re
import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import connections

from chaos.invariants import Result, check
from chaos.load import owner
from chaos.scenarios import SCENARIO_NAMES
from jobs import services
from jobs.models import Job
from runs.clock import db_now
from runs.models import Attempt, Run
from tests.conftest import ROOT, daemon_env

pytestmark = pytest.mark.django_db(transaction=True)


def run_short(scenario: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "chaos", scenario, "--short", "--seed", "7"],
        env=daemon_env("redis"), cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    # A PostgreSQL restart broke this process's connection too.
    connections.close_all()
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [n for n in SCENARIO_NAMES if n != "many-daemons"])
def test_short_scenario_keeps_every_invariant(scenario):
    proc = run_short(scenario)

    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "verdict              PASS" in proc.stdout, report
    assert "runs lost            0 " in proc.stdout, report


@pytest.mark.slow
def test_three_of_each_daemon_stopped_in_turns_move_partitions_and_shards_and_lose_nothing():
    proc = run_short("many-daemons")

    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "verdict              PASS" in proc.stdout, report
    assert "runs lost            0 " in proc.stdout, report
    assert "duplicate run rows   0" in proc.stdout, report
    for kind in ("partition", "shard"):
        moves = re.search(rf"{kind}s: (\d+) holds passed to another holder", proc.stdout)
        assert moves and int(moves.group(1)) > 0, report


def test_the_checker_counts_a_missing_cron_occurrence_and_an_unexplained_duplicate(tmp_path):
    user = owner()
    cron_job = services.create_job("chaos.work", {}, owner=user, cron_expr="* * * * *",
                                   misfire_policy="run_all")
    one_off = services.create_job("chaos.work", {}, owner=user, delay_s=0)
    first = db_now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    Job.objects.filter(pk=cron_job.pk).update(next_run_at=first + timedelta(minutes=3))
    for minute in (0, 2):  # minute 1 was never materialised: lost
        at = first + timedelta(minutes=minute)
        Run.objects.create(job=cron_job, scheduled_at=at, run_at=at, state="succeeded")
    run = Run.objects.get(job=one_off)
    Run.objects.filter(pk=run.pk).update(state="succeeded", attempt=2)
    Attempt.objects.create(run=run, number=1, worker_id="w:1:a", started_at=run.run_at,
                           outcome="released")
    Attempt.objects.create(run=run, number=2, worker_id="w:2:b", started_at=run.run_at,
                           outcome="succeeded")
    log = tmp_path / "exec.log"
    log.write_text(f"end {run.pk} 1 11 1.0 1.0\nend {run.pk} 2 12 2.0 2.0\n")

    result = check(Result("unit", 0), user, {cron_job.pk: first}, db_now(), log)

    assert (result.missing_occurrences, result.lost) == (1, 1)
    assert result.duplicate_executions == 1
    assert result.unexplained_duplicates == [
        f"run {run.pk} attempt 1 ran to its end but was recorded released"]
    assert not result.ok
