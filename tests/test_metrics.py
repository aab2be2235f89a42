"""The scaling signal (docs/scaling.md): per queue and shard depth, oldest ready age, throughput and
lag from runs/metrics/stats.py, as /api/queues/ and the Prometheus endpoint /metrics expose them.
Real PostgreSQL and Redis; runs are made in known states and the numbers asserted."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import Job
from jobs.tenants import set_owner_policy
from runs.brokers import get_broker
from runs.brokers.redis import RedisBroker
from runs.clock import db_now
from runs.execution.transitions import run_refs
from runs.metrics import endpoint as metrics
from runs.metrics import stats
from runs.models import Run, RunState, WorkerProcess
from scheduler_core.exceptions import BrokerUnavailable
from tests.conftest import flush_redis, make_runs
from tests.test_api_helpers import client_for, one_off, user_with

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["redis", "database"])
def broker(request, monkeypatch):
    """The configured broker (what /metrics and /api/queues/ read) on PostgreSQL."""
    monkeypatch.setenv("SCHEDULER_BROKER", request.param)
    flush_redis()
    yield get_broker()
    flush_redis()


def job_on(queue: str, owner=None) -> Job:
    return Job.objects.create(name=f"on {queue}", handler="noop", queue=queue, owner=owner,
                              run_at=db_now())


def ran(job: Job, shard: int, state: str, lag_s: float, started_ago_s: float,
        finished_ago_s: float | None = None) -> Run:
    """A run of ``job`` on ``shard`` that started ``started_ago_s`` seconds ago, ``lag_s``
    seconds after its run_at, and is now in ``state`` (finished ``finished_ago_s`` ago)."""
    now = db_now()
    started = now - timedelta(seconds=started_ago_s)
    run_at = started - timedelta(seconds=lag_s)
    finished = now - timedelta(seconds=finished_ago_s) if finished_ago_s is not None else None
    run = Run.objects.create(
        job=job, scheduled_at=run_at - timedelta(microseconds=Run.objects.count()),
        run_at=run_at, state=state, queue=job.queue, shard=shard, attempt=1,
        started_at=started, finished_at=finished,
        lease_expires_at=now + timedelta(seconds=60) if state == RunState.RUNNING else None)
    # Made when it was scheduled, as the scheduler makes runs: lag counts from the later
    # of the two (runs/models.py, LAG_FROM).
    Run.objects.filter(pk=run.pk).update(created_at=run.scheduled_at)
    return run


SCRAPE_TOKEN = "scrape-token-of-the-tests"


def scrape(**headers) -> dict:
    """GET /metrics (with the tests' bearer token unless ``headers`` give Authorization);
    {(name, labels as a sorted tuple): value}."""
    headers.setdefault("Authorization", f"Bearer {SCRAPE_TOKEN}")
    with override_settings(SCHEDULER={"METRICS_TOKEN": SCRAPE_TOKEN}):
        response = Client().get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def at(queue, shard, **more) -> tuple:
    return tuple(sorted({"queue": queue, "shard": str(shard), **more}.items()))


def backlog(broker):
    """Queue q1: shard 0 has 3 runs due 30 s ago, one of them leased; shard 1 has 2 runs
    due in an hour."""
    make_runs("default", 3, queue="q1", shard=0, delay_s=-30)
    make_runs("default", 2, queue="q1", shard=1, delay_s=3600)
    broker.push(run_refs(Run.objects.all()))
    broker.promote()
    leases = broker.lease(["q1"], 1, "w1")
    assert len(leases) == 1


def test_depth_and_oldest_ready_age_are_reported_per_shard(broker):
    backlog(broker)

    [q1] = stats.queue_stats()

    assert [(s.shard, s.ready, s.delayed, s.leased) for s in q1.shards] == [
        (0, 2, 0, 1), (1, 0, 2, 0)]
    assert (q1.queue, q1.ready, q1.delayed, q1.leased) == ("q1", 2, 2, 1)
    assert 29 <= q1.shards[0].oldest_ready_age_s < 60
    assert q1.shards[1].oldest_ready_age_s is None
    assert q1.oldest_ready_age_s == q1.shards[0].oldest_ready_age_s
    # The leased run started just now, 30 s after its run_at.
    assert q1.shards[0].lag_s.count == 1 and 29 <= q1.shards[0].lag_s.max_s < 60


def test_metrics_expose_depth_and_age_per_shard(broker):
    backlog(broker)

    samples = scrape()

    assert samples[("scheduler_broker_up", ())] == 1
    assert samples[("scheduler_queue_ready", at("q1", 0))] == 2
    assert samples[("scheduler_queue_leased", at("q1", 0))] == 1
    assert samples[("scheduler_queue_delayed", at("q1", 0))] == 0
    assert samples[("scheduler_queue_delayed", at("q1", 1))] == 2
    assert samples[("scheduler_queue_ready", at("q1", 1))] == 0
    assert 29 <= samples[("scheduler_queue_oldest_ready_age_seconds", at("q1", 0))] < 60
    assert samples[("scheduler_queue_oldest_ready_age_seconds", at("q1", 1))] == 0


def finished_and_running():
    """Queue q2 over two shards, lags in seconds:
    shard 0: succeeded 1..6 (finished 10 s ago), dead 10, 20 (finished 20 s ago), running 100;
    shard 1: dead 30 (finished 20 s ago), cancelled 7 (finished 5 s ago);
    on shard 0 but outside the lag window (started over 60 s ago): running 1000, and
    succeeded 800 that finished 30 s ago (so it counts for throughput);
    outside both windows: 2 succeeded on shard 0 that started 200 s and finished 120 s ago."""
    job = job_on("q2")
    for lag in range(1, 7):
        ran(job, 0, RunState.SUCCEEDED, lag, started_ago_s=30, finished_ago_s=10)
    for lag in (10, 20):
        ran(job, 0, RunState.DEAD, lag, started_ago_s=30, finished_ago_s=20)
    ran(job, 0, RunState.RUNNING, 100, started_ago_s=5)
    ran(job, 1, RunState.DEAD, 30, started_ago_s=30, finished_ago_s=20)
    ran(job, 1, RunState.CANCELLED, 7, started_ago_s=30, finished_ago_s=5)
    ran(job, 0, RunState.RUNNING, 1000, started_ago_s=90)
    ran(job, 0, RunState.SUCCEEDED, 800, started_ago_s=90, finished_ago_s=30)
    for _ in range(2):
        ran(job, 0, RunState.SUCCEEDED, 500, started_ago_s=200, finished_ago_s=120)


def test_throughput_counts_final_states_of_the_last_minute_per_shard(broker):
    finished_and_running()

    [q2] = stats.queue_stats()
    shard0, shard1 = q2.shards

    assert shard0.throughput_per_s == {"succeeded": round(7 / 60, 3), "dead": round(2 / 60, 3),
                                       "cancelled": 0.0, "expired": 0.0}
    assert shard1.throughput_per_s == {"succeeded": 0.0, "dead": round(1 / 60, 3),
                                       "cancelled": round(1 / 60, 3), "expired": 0.0}
    assert q2.throughput_per_s == {"succeeded": round(7 / 60, 3), "dead": 0.05,
                                   "cancelled": round(1 / 60, 3), "expired": 0.0}


def test_lag_percentiles_cover_runs_started_in_the_last_minute(broker):
    finished_and_running()

    [q2] = stats.queue_stats()
    shard0, shard1 = q2.shards

    # Shard 0: 1 2 3 4 5 6 10 20 100 -> median 5, p99 at rank 7.92 = 20 + 0.92 * 80.
    assert shard0.lag_s == stats.Lag(count=9, p50_s=5.0, p99_s=93.6, max_s=100.0)
    assert shard1.lag_s == stats.Lag(count=2, p50_s=18.5, p99_s=29.77, max_s=30.0)
    # The queue: 1 2 3 4 5 6 7 10 20 30 100 -> median 6, p99 at rank 9.9 = 30 + 0.9 * 70.
    assert q2.lag_s == stats.Lag(count=11, p50_s=6.0, p99_s=93.0, max_s=100.0)


def test_metrics_expose_throughput_and_lag(broker):
    finished_and_running()

    samples = scrape()

    rate = "scheduler_queue_throughput_runs_per_second"
    assert samples[(rate, at("q2", 0, outcome="succeeded"))] == pytest.approx(7 / 60)
    assert samples[(rate, at("q2", 0, outcome="dead"))] == pytest.approx(2 / 60)
    assert samples[(rate, at("q2", 1, outcome="cancelled"))] == pytest.approx(1 / 60)
    assert samples[(rate, at("q2", 1, outcome="succeeded"))] == 0
    lag = "scheduler_queue_lag_seconds"
    assert samples[(lag, at("q2", 0, quantile="0.5"))] == 5.0
    assert samples[(lag, at("q2", 0, quantile="0.99"))] == pytest.approx(93.6)
    assert samples[(lag, at("q2", 0, quantile="1"))] == 100.0
    assert samples[("scheduler_queue_started_runs", at("q2", 0))] == 9
    assert samples[("scheduler_queue_started_runs", at("q2", 1))] == 2


def test_python_percentiles_match_postgresql():
    finished_and_running()
    since = db_now() - timedelta(seconds=stats.WINDOW_S)

    assert stats.lags("default", since, in_database=False) == \
        stats.lags("default", since, in_database=True)


def test_runs_of_a_paused_job_do_not_age_the_queue(broker):
    [run] = make_runs("default", 1, queue="q3", delay_s=-120)
    broker.push(run_refs(Run.objects.all()))
    Job.objects.filter(pk=run.job_id).update(status=Job.Status.PAUSED)

    [q3] = stats.queue_stats()

    assert q3.oldest_ready_age_s is None


def test_live_workers_and_their_slots_per_queue(broker):
    now = db_now()
    for worker_id, queues, concurrency in (("w1", ["a", "b"], 4), ("w2", ["b"], 8)):
        WorkerProcess.objects.create(worker_id=worker_id, hostname="h", pid=1, queues=queues,
                                     concurrency=concurrency, started_at=now,
                                     last_heartbeat_at=now)
    WorkerProcess.objects.create(worker_id="gone", hostname="h", pid=2, queues=["b"],
                                 concurrency=16, started_at=now, last_heartbeat_at=now,
                                 stopped_at=now)

    by_queue = {q.queue: (q.live_workers, q.worker_slots) for q in stats.queue_stats()}
    samples = scrape()

    assert by_queue == {"a": (1, 4), "b": (2, 12)}
    assert samples[("scheduler_queue_worker_slots", (("queue", "b"),))] == 12
    assert samples[("scheduler_queue_live_workers", (("queue", "a"),))] == 1


def test_api_queues_keeps_its_fields_and_adds_shards_throughput_and_lag(broker):
    alice = User.objects.create_user("alice")
    staff = client_for(user_with("ops", "runs.view_run"))
    set_owner_policy(alice, queues=["q2"])  # her tenant queue
    one_off(alice, queue="q2")  # so alice sees q2
    finished_and_running()

    [mine] = client_for(alice).get("/api/queues/").json()
    everyone = staff.get("/api/queues/").json()

    assert {"queue", "ready", "delayed", "leased", "oldest_ready_age_s",
            "live_workers"} <= set(mine)
    assert mine["queue"] == "q2" and mine["delayed"] == 1
    assert mine["throughput_per_s"]["succeeded"] == round(7 / 60, 3)
    assert mine["lag_s"] == {"count": 11, "p50_s": 6.0, "p99_s": 93.0, "max_s": 100.0}
    assert [s["shard"] for s in mine["shards"]] == [0, 1]
    assert mine["shards"][1]["lag_s"]["max_s"] == 30.0
    assert mine["shards"][0]["throughput_per_s"]["dead"] == round(2 / 60, 3)
    assert [q["queue"] for q in everyone] == ["q2"]


def test_an_unreachable_broker_is_reported_not_hidden(monkeypatch):
    down = RedisBroker(url="redis://127.0.0.1:1/0")
    monkeypatch.setattr(metrics, "get_broker", lambda using: down)
    monkeypatch.setattr(stats, "get_broker", lambda using: down)
    finished_and_running()

    with pytest.raises(BrokerUnavailable):
        stats.shard_depth(down)
    samples = scrape()
    staff = client_for(User.objects.create_user("ops", is_staff=True))

    assert samples[("scheduler_broker_up", ())] == 0
    assert not any(name == "scheduler_queue_ready" for name, _ in samples)
    assert samples[("scheduler_queue_lag_seconds", at("q2", 0, quantile="1"))] == 100.0
    assert staff.get("/api/queues/").status_code == 503


def test_metrics_are_closed_to_anonymous_clients_by_default(monkeypatch):
    monkeypatch.delenv("SCHEDULER_METRICS_TOKEN", raising=False)
    monkeypatch.delenv("SCHEDULER_METRICS_OPEN", raising=False)
    client = Client()

    closed = client.get("/metrics")
    monkeypatch.setenv("SCHEDULER_METRICS_OPEN", "true")
    opened = client.get("/metrics")
    monkeypatch.setenv("SCHEDULER_METRICS_OPEN", "maybe")

    assert closed.status_code == 403
    assert b"SCHEDULER_METRICS_TOKEN" in closed.content
    assert b"scheduler_broker_up" not in closed.content
    assert opened.status_code == 200 and b"scheduler_broker_up" in opened.content
    with pytest.raises(ImproperlyConfigured, match="METRICS_OPEN='maybe'"):
        client.get("/metrics")


def test_metrics_need_the_bearer_token_when_one_is_set(monkeypatch):
    monkeypatch.setenv("SCHEDULER_METRICS_TOKEN", "s3cret")
    monkeypatch.setenv("SCHEDULER_METRICS_OPEN", "true")  # a token overrides it
    client = Client()

    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Token s3cret"}).status_code == 401
    assert client.get("/metrics").headers["WWW-Authenticate"].startswith("Bearer")
    assert Client().get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.post("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 405
