"""The /metrics families operators alert on (docs/alerts.md, "Metrics"): dead letter per
queue and owner, runs by outcome, the start-lag histogram, busy and total slots, partition
and shard holders. Real PostgreSQL (and SQLite for the histogram's Python path)."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from jobs.models import SchedulerPartition
from runs.clock import db_now
from runs.execution import outcomes
from runs.execution.outcomes import flush_counts
from runs.metrics.health import LAG_BUCKETS, lag_buckets
from runs.models import RunState, ShardLease, WorkerProcess
from scheduler_core import conf
from tests.test_metrics import finished_and_running, job_on, ran, scrape

pytestmark = pytest.mark.django_db(transaction=True)


def test_dead_letter_per_queue_and_per_owner():
    olga = User.objects.create_user("olga")
    for queue, owner, n in (("q1", olga, 2), ("q1", None, 1), ("q2", olga, 3)):
        job = job_on(queue, owner)
        for _ in range(n):
            ran(job, 0, RunState.DEAD, 1, started_ago_s=5, finished_ago_s=1)
    ran(job_on("q1", olga), 0, RunState.SUCCEEDED, 1, started_ago_s=5, finished_ago_s=1)

    samples = scrape()

    assert samples[("scheduler_dead_letter_runs", (("queue", "q1"),))] == 3
    assert samples[("scheduler_dead_letter_runs", (("queue", "q2"),))] == 3
    assert samples[("scheduler_dead_letter_runs_by_owner", (("owner", "olga"),))] == 5


def test_outcomes_are_counters_that_add_up_across_flushes():
    flush_counts("default")  # whatever earlier tests counted in this process
    outcomes.OutcomeCount.objects.all().delete()
    for _ in range(5):
        outcomes._table.add("q1", "succeeded")
    outcomes._table.add("q1", "dead")
    flush_counts("default")
    outcomes._table.add("q1", "succeeded")
    outcomes._table.add("q1", "succeeded")
    flush_counts("default")

    samples = scrape()

    total = "scheduler_runs_total"
    assert samples[(total, (("outcome", "succeeded"), ("queue", "q1")))] == 7
    assert samples[(total, (("outcome", "dead"), ("queue", "q1")))] == 1
    assert outcomes.counts("default") == [("q1", "dead", 1), ("q1", "succeeded", 7)]


def test_start_lag_is_a_histogram_of_the_last_minute():
    finished_and_running()  # q2: lags 1..6, 10, 20, 100 on shard 0; 30, 7 on shard 1

    samples = scrape()

    def bucket(le):
        return samples[("scheduler_start_lag_seconds_bucket", (("le", le), ("queue", "q2")))]

    assert bucket("1.0") == 1
    assert bucket("5.0") == 5
    assert bucket("10.0") == 8
    assert bucket("30.0") == 10
    assert bucket("300.0") == 11
    assert bucket("+Inf") == 11
    assert samples[("scheduler_start_lag_seconds_gcount", (("queue", "q2"),))] == 11
    assert samples[("scheduler_start_lag_seconds_gsum", (("queue", "q2"),))] == \
        pytest.approx(1 + 2 + 3 + 4 + 5 + 6 + 10 + 20 + 100 + 30 + 7)


def test_the_histogram_in_python_matches_postgresql():
    finished_and_running()
    since = db_now() - timedelta(seconds=60)

    in_pg = lag_buckets("default", since, in_database=True)
    in_python = lag_buckets("default", since, in_database=False)

    assert in_pg.keys() == in_python.keys() == {"q2"}
    assert in_pg["q2"][0] == in_python["q2"][0]
    assert len(in_pg["q2"][0]) == len(LAG_BUCKETS)
    assert (in_pg["q2"][1], in_pg["q2"][2]) == (pytest.approx(in_python["q2"][1]), 11)


def test_busy_and_total_slots_and_live_workers():
    now = db_now()
    for worker_id, queues, concurrency in (("w1", ["a", "b"], 4), ("w2", ["b"], 8)):
        WorkerProcess.objects.create(worker_id=worker_id, hostname="h", pid=1, queues=queues,
                                     concurrency=concurrency, started_at=now,
                                     last_heartbeat_at=now)
    job = job_on("b")
    for _ in range(3):
        ran(job, 0, RunState.RUNNING, 0.1, started_ago_s=1)

    samples = scrape()

    assert samples[("scheduler_worker_slots", ())] == 12  # w1 once, though it serves two
    assert samples[("scheduler_live_workers", ())] == 2
    assert samples[("scheduler_queue_busy_slots", (("queue", "b"),))] == 3


def test_partition_and_shard_holders():
    now = db_now()
    live, gone = now + timedelta(seconds=30), now - timedelta(seconds=1)
    for number, owner, until in ((0, "s1", live), (1, "s1", live), (2, "s2", gone)):
        SchedulerPartition.objects.create(number=number, owner=owner, lease_expires_at=until)
    ShardLease.objects.create(number=0, owner="d1", lease_expires_at=live)

    samples = scrape()

    assert samples[("scheduler_partitions_held", (("holder", "s1"),))] == 2
    assert ("scheduler_partitions_held", (("holder", "s2"),)) not in samples
    assert samples[("scheduler_partitions_unheld", ())] == conf.get("PARTITIONS") - 2
    assert samples[("scheduler_shards_held", (("holder", "d1"),))] == 1
    assert samples[("scheduler_shards_unheld", ())] == conf.get("SHARDS") - 1
