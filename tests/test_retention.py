"""How long the history is kept (runs/retention.py): finished runs past
HISTORY_RETENTION_S go with their attempts and log lines, and the one-off jobs left with
no run; the dead letter, unfinished runs and cron jobs stay. On PostgreSQL and SQLite."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from jobs.models import Job, Schedule
from runs import retention
from runs.clock import db_now
from runs.dispatcher import Dispatcher
from runs.models import Attempt, LogLine, Run
from tests.conftest import flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

DAY = 86_400


def finished(using: str, run: Run, state: str, days_ago: float, lines: int = 2) -> Run:
    """Make ``run`` finished in ``state`` ``days_ago`` days ago, with one attempt and
    ``lines`` log lines."""
    at = db_now(using) - timedelta(days=days_ago)
    Run.objects.using(using).filter(pk=run.pk).update(state=state, finished_at=at, attempt=1)
    attempt = Attempt.objects.using(using).create(run_id=run.pk, number=1, worker_id="w",
                                                  started_at=at, finished_at=at,
                                                  outcome=state)
    LogLine.objects.using(using).bulk_create(
        [LogLine(attempt=attempt, created_at=at, level=20, logger="t", message=f"line {i}")
         for i in range(lines)])
    return run


def history(using: str) -> dict:
    """A small history: which job and run is which."""
    old, recent = 8, 1
    a1, a2 = make_runs(using, 2)  # one-off, both succeeded long ago
    b_ok, b_dead = make_runs(using, 2)  # one-off: one succeeded, one dead, long ago
    [c] = make_runs(using, 1)  # one-off, succeeded recently
    [d] = make_runs(using, 1)  # one-off, cancelled long ago
    [e] = make_runs(using, 1)  # a cron job's run, succeeded long ago
    [f] = make_runs(using, 1)  # pending, created long ago
    for run in (a1, a2, b_ok, e):
        finished(using, run, "succeeded", old)
    finished(using, b_dead, "dead", old)
    finished(using, c, "succeeded", recent)
    finished(using, d, "cancelled", old)
    schedule = Schedule.objects.using(using).create(cron="* * * * *")
    Job.objects.using(using).filter(pk=e.job_id).update(schedule=schedule, run_at=None)
    return {"a": [a1, a2], "b_ok": b_ok, "b_dead": b_dead, "c": c, "d": d, "e": e, "f": f}


@pytest.mark.parametrize("using", ["default", "sqlite"])
def test_prune_deletes_finished_history_past_the_cutoff_and_keeps_the_rest(using):
    runs = history(using)

    pruned = retention.prune(retention.cutoff(7 * DAY, using), 100, using)

    gone = [*runs["a"], runs["b_ok"], runs["d"], runs["e"]]
    kept = [runs["b_dead"], runs["c"], runs["f"]]
    assert (pruned.runs, pruned.attempts, pruned.log_lines, pruned.jobs) == (5, 5, 10, 2)
    left = set(Run.objects.using(using).values_list("pk", flat=True))
    assert left == {r.pk for r in kept}
    assert not Attempt.objects.using(using).filter(run_id__in=[r.pk for r in gone]).exists()
    assert LogLine.objects.using(using).count() == 4  # the dead run's and the recent one's
    jobs = set(Job.objects.using(using).values_list("pk", flat=True))
    # The one-off jobs left with no run go; the one with its dead run and the cron job stay.
    assert jobs == {runs["b_dead"].job_id, runs["c"].job_id, runs["e"].job_id,
                    runs["f"].job_id}


@pytest.mark.parametrize("using", ["default", "sqlite"])
def test_prune_takes_at_most_its_limit_and_says_when_it_is_done(using):
    history(using)
    before = retention.cutoff(7 * DAY, using)

    sizes = []
    while not sizes or sizes[-1] == 2:
        sizes.append(retention.prune(before, 2, using).runs)

    assert sizes == [2, 2, 1]
    assert retention.prunable(before, using).count() == 0


def test_the_dispatcher_prunes_its_shards_past_the_retention(settings):
    flush_redis()
    runs = history("default")
    settings.SCHEDULER = {"HISTORY_RETENTION_S": 2 * DAY}

    Dispatcher("default").round()

    left = set(Run.objects.values_list("pk", flat=True))
    assert left == {runs["b_dead"].pk, runs["c"].pk, runs["f"].pk}
    flush_redis()


def test_a_retention_of_0_keeps_everything(settings):
    flush_redis()
    history("default")
    settings.SCHEDULER = {"HISTORY_RETENTION_S": 0}

    Dispatcher("default").round()

    assert Run.objects.count() == 8
    with pytest.raises(CommandError, match="retention is 0"):
        call_command("prunehistory")
    flush_redis()


def test_prunehistory_counts_on_a_dry_run_and_deletes_otherwise():
    history("default")
    out = StringIO()

    call_command("prunehistory", "--older-than", str(2 * DAY), "--dry-run", stdout=out)
    assert "5 runs finished before" in out.getvalue() and "dry run" in out.getvalue()
    assert Run.objects.count() == 8

    call_command("prunehistory", "--older-than", str(2 * DAY), "--batch", "2", stdout=out)
    assert "Deleted 5 runs" in out.getvalue()
    assert "5 attempts, 10 log lines and 2 one-off jobs" in out.getvalue()
    assert Run.objects.count() == 3
