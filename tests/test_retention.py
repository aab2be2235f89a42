"""How long the history is kept (runs/history/retention.py): finished runs past
HISTORY_RETENTION_S go with their attempts and log lines, and the one-off jobs left with
no run; the dead letter, unfinished runs and cron jobs stay. On PostgreSQL and SQLite."""

import threading
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from jobs import services as job_services
from jobs.models import Job, Schedule
from runs import services as run_services
from runs.clock import db_now
from runs.daemons.dispatcher import Dispatcher
from runs.history import retention
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


# --- found by an adversarial review ----------------------------------------------------


def in_thread(fn) -> tuple[threading.Thread, dict]:
    """Start ``fn`` in a thread on its own database session; its result or error lands
    in the returned dict."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            box["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    return thread, box


def test_a_trigger_racing_the_prune_of_its_job_fails_or_keeps_its_run():
    # The job's delete used to read "jobs with no run" and then cascade in separate
    # statements: a trigger committing in between lost its run (after a 201), or failed
    # the batch on the foreign key. Now the prune locks the job first.
    [run] = make_runs("default", 1)
    finished("default", run, "succeeded", 8)
    started = {}

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not started and 'FROM "jobs_job"' in sql and "FOR UPDATE" in sql:
            started["trigger"] = in_thread(lambda: job_services.trigger(run.job_id))
            time.sleep(0.3)  # the trigger now waits on the job's lock
        return result

    with connection.execute_wrapper(wrapper):
        pruned = retention.prune(retention.cutoff(7 * DAY), 100)
    thread, box = started["trigger"]
    thread.join(30)

    assert pruned.runs == 1
    if "error" in box:  # the job was pruned first: the trigger finds it gone
        assert isinstance(box["error"], Job.DoesNotExist), box["error"]
        assert not Job.objects.filter(pk=run.job_id).exists()
    else:
        assert Run.objects.filter(pk=box["value"].pk).exists()


def test_two_prunes_of_one_jobs_runs_at_once_leave_no_job_without_runs():
    # Two dispatchers in a shard handover each deleted one run of a one-off job, each
    # saw the other's run still there, and both kept the job: a job with no run, which
    # no later prune would look at again.
    runs = make_runs("default", 4)
    for r in runs:
        finished("default", r, "succeeded", 8)
    before = retention.cutoff(7 * DAY)

    def slow_deletes(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith('DELETE FROM "runs_run"'):
            time.sleep(0.1)  # both prunes in flight at once
        return result

    def prune_all():
        with connection.execute_wrapper(slow_deletes):
            while retention.prune(before, 1).runs:
                pass

    pruners = [in_thread(prune_all) for _ in range(2)]
    for thread, box in pruners:
        thread.join(30)
        assert "error" not in box, box

    assert not Run.objects.filter(job_id=runs[0].job_id).exists()
    assert not Job.objects.filter(pk=runs[0].job_id).exists()


@pytest.mark.parametrize("value", ["inf", "1e12", "nan"])
def test_a_retention_too_long_to_reckon_keeps_everything_and_the_dispatcher_serving(
        settings, value):
    # cutoff() subtracted it from now: OverflowError or ValueError killed the dispatcher.
    flush_redis()
    history("default")
    settings.SCHEDULER = {"HISTORY_RETENTION_S": value}

    Dispatcher("default").serve(max_rounds=2)

    assert Run.objects.count() == 8
    flush_redis()


@pytest.mark.parametrize("value", ["nan", "inf", "-5"])
def test_prunehistory_refuses_an_age_that_is_not_a_positive_number(value):
    with pytest.raises(CommandError, match="--older-than must be a positive number"):
        call_command("prunehistory", f"--older-than={value}", stdout=StringIO())


def test_prunehistory_with_an_age_older_than_anything_prunes_nothing():
    history("default")
    out = StringIO()

    call_command("prunehistory", "--older-than", "1e12", stdout=out)

    assert "nothing to prune" in out.getvalue()
    assert Run.objects.count() == 8


def test_a_discarded_dead_run_is_kept_for_the_retention_from_its_discard():
    # discard() kept the run's finished_at (when it died): one dead for over the
    # retention lost its attempts and logs at the first prune after its discard.
    [run] = make_runs("default", 1)
    finished("default", run, "dead", 8)

    assert run_services.discard([run.pk]) == 1
    retention.prune(retention.cutoff(7 * DAY), 100)

    assert Run.objects.get(pk=run.pk).state == "cancelled"
    assert Attempt.objects.filter(run_id=run.pk).exists()


@pytest.mark.parametrize("batch", ["0", "10001"])
def test_prunehistory_refuses_a_batch_out_of_range(batch):
    with pytest.raises(CommandError, match="--batch must be between 1 and 10000"):
        call_command("prunehistory", "--older-than", "60", "--batch", batch)



def test_idempotency_keys_past_their_ttl_are_pruned_by_the_dispatcher_and_the_command():
    """Stored Idempotency-Key responses are replayed for IDEMPOTENCY_TTL_S only; past it
    the dispatcher's retention pass and prunehistory delete them."""
    from django.contrib.auth.models import User

    from jobs.models import IdempotencyKey

    alice = User.objects.create_user("alice")
    for key in ("a", "b", "fresh"):
        IdempotencyKey.objects.create(owner=alice, key=key, path="/api/jobs/",
                                      status_code=201, response={})
    old = db_now("default") - timedelta(days=2)
    IdempotencyKey.objects.filter(key="a").update(created_at=old)

    flush_redis()
    Dispatcher("default").round()
    assert sorted(IdempotencyKey.objects.values_list("key", flat=True)) == ["b", "fresh"]

    IdempotencyKey.objects.filter(key="b").update(created_at=old)
    out = StringIO()
    call_command("prunehistory", "--older-than", "60", stdout=out)
    assert "and 1 Idempotency-Key responses" in out.getvalue()
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["fresh"]
