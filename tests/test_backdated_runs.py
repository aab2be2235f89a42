"""A run backdated before it existed (docs/api.md, "Job fields"): a negative ``delay_s``
is refused at every way in; a one-off whose ``run_at`` is in the past runs at once, and
its lag counts from when it was made, in every lag figure (/metrics, /api/queues/, the
run's ``lag_s``, the admin's lag, the dashboard), not from 1970; so do its wait while it
is due (oldest ready age) and the owner's late alert."""

from datetime import timedelta

import pytest

from jobs import services
from jobs.models import Job
from runs.admin.helpers import with_timing
from runs.alerts import late
from runs.alerts.models import AlertPolicy
from runs.clock import db_now
from runs.dashboard.figures import series
from runs.metrics import stats
from runs.metrics.health import lag_buckets
from runs.models import Attempt, AttemptOutcome, Run, RunState
from scheduler_core.exceptions import InvalidJob
from tests.test_metrics import at, scrape

pytestmark = pytest.mark.django_db(transaction=True)

CENTURY_S = 3_153_600_000


def test_a_negative_delay_is_refused_naming_delay_s_at_every_way_in(api):
    rest = api.post("/api/jobs/", {"handler": "noop", "delay_s": -CENTURY_S}, format="json")
    small = api.post("/api/jobs/", {"handler": "noop", "delay_s": -1}, format="json")
    bulk = api.post("/api/jobs/bulk/", {"jobs": [{"handler": "noop", "delay_s": 5},
                                                 {"handler": "noop", "delay_s": -0.5}]},
                    format="json")
    with pytest.raises(InvalidJob) as python:
        services.create_job("noop", delay_s=-60)

    assert rest.status_code == 400 and set(rest.json()) == {"delay_s"}, rest.content
    assert small.status_code == 400 and set(small.json()) == {"delay_s"}
    assert bulk.status_code == 400
    assert [(e["index"], set(e["errors"])) for e in bulk.json()["errors"]] == [(1, {"delay_s"})]
    assert set(python.value.errors) == {"delay_s"}
    assert not Job.objects.exists() and not Run.objects.exists()


def start(run: Run, after_s: float) -> Run:
    """Mark ``run`` started ``after_s`` seconds after its creation, on its first attempt,
    as a worker would (the worker's own path is tested elsewhere; here only the figures)."""
    started = run.created_at + timedelta(seconds=after_s)
    Run.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED, attempt=1,
                                         started_at=started, finished_at=started)
    Attempt.objects.create(run=run, number=1, worker_id="w1", started_at=started,
                           finished_at=started, outcome=AttemptOutcome.SUCCEEDED)
    return Run.objects.get(pk=run.pk)


def test_a_backdated_one_off_runs_now_and_its_lag_counts_from_its_creation(api):
    answer = api.post("/api/jobs/", {"handler": "noop", "run_at": "1970-01-01T00:00:00Z"},
                      format="json")
    assert answer.status_code == 201, answer.content
    [run] = Run.objects.filter(job_id=answer.json()["id"])
    assert run.run_at <= db_now()  # due at once, as Celery's eta in the past
    since = run.created_at - timedelta(seconds=1)
    run = start(run, 0.25)

    assert api.get(f"/api/runs/{run.pk}/").json()["lag_s"] == 0.25
    for in_database in (True, False):
        shard_lag, queue_lag = stats.lags("default", since, in_database=in_database)
        assert queue_lag["default"].max_s == 0.25
        assert shard_lag[("default", run.shard)].max_s == 0.25
        buckets, total, count = lag_buckets("default", since, in_database)["default"]
        assert count == 1 and total == pytest.approx(0.25) and buckets[0] == 0
        assert buckets[3] == 1  # the 0.5 s bucket, not +Inf
    [timed] = with_timing(Run.objects.filter(pk=run.pk))
    assert timed.lag == timedelta(seconds=0.25)
    assert max(v for v in series("default")["lag_p99_s"] if v is not None) < 1
    samples = scrape()
    assert samples[("scheduler_queue_lag_seconds", at("default", run.shard, quantile="1"))] \
        == 0.25
    [queue] = api.get("/api/queues/").json()
    assert queue["lag_s"]["max_s"] == 0.25


def test_a_run_made_ahead_of_its_time_still_counts_lag_from_its_time(api, alice):
    job = services.create_job("noop", delay_s=0, owner=alice)
    [run] = Run.objects.filter(job=job)
    later = run.created_at + timedelta(seconds=30)
    Run.objects.filter(pk=run.pk).update(scheduled_at=later, run_at=later)
    run = start(Run.objects.get(pk=run.pk), 31.5)

    assert api.get(f"/api/runs/{run.pk}/").json()["lag_s"] == 1.5
    _, queue_lag = stats.lags("default", run.created_at, in_database=True)
    assert queue_lag["default"].max_s == 1.5
    assert Job.objects.count() == 1


def test_a_backdated_run_waiting_to_start_is_not_decades_old(api, alice):
    AlertPolicy.objects.create(owner=alice, late_after_s=30)
    answer = api.post("/api/jobs/", {"handler": "noop", "run_at": "1970-01-01T00:00:00Z"},
                      format="json")
    assert answer.status_code == 201, answer.content
    [run] = Run.objects.filter(job_id=answer.json()["id"])

    oldest = stats.oldest_due("default", db_now())[("default", run.shard)]
    assert oldest == run.created_at  # its wait starts when it was made, not in 1970
    assert late.scan() == 0  # not "late" by 56 years
