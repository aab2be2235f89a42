"""An idle worker whose ack has just made runs ready (a workflow's downstream nodes, made
in the ack's transaction) leases at once instead of sleeping out WORKER_POLL_S
(runs/worker/acks.py; BENCHMARKS.md, "W7"). Seen through a burst worker, which stops once
it is idle with nothing in flight: before, its own ack's downstream run was left for the
next worker."""

import time

import pytest

from jobs.registry import handler
from runs.worker import Worker
from workflows import services
from workflows.models import NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("wake.noop")
def noop(ctx, payload):
    return None


def test_a_burst_worker_runs_the_downstream_node_its_own_ack_made_ready(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name, "WORKER_POLL_S": 1}
    workflow = services.create_workflow(
        "two", [{"name": n, "handler": "wake.noop"} for n in ("a", "b", "c")],
        [["a", "b"], ["b", "c"]], using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    broker.promote()

    Worker(["default"], concurrency=2, using=broker.using, burst=True).serve()

    states = dict(NodeRun.objects.using(broker.using).filter(workflow_run=workflow_run)
                  .values_list("node__name", "state"))
    assert states == {"a": "succeeded", "b": "succeeded", "c": "succeeded"}
    assert WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state == "succeeded"


# --- an idle worker blocks on the broker's wake lists (runs/brokers/redis/wake.py) -----


def test_a_push_of_runs_due_now_leaves_tokens_and_a_delayed_one_none(redis_kind):
    from datetime import timedelta

    from django.utils import timezone

    from runs.brokers import get_broker
    from runs.brokers.redis.wake import WAKE_TOKENS
    from runs.types import RunRef

    broker = get_broker("default", name="redis")
    later = timezone.now() + timedelta(hours=1)
    broker.push([RunRef(1, "default", 0, 5, later, None)])
    assert broker.client.llen(broker.keys.wake("default")) == 0

    now = timezone.now()
    broker.push([RunRef(i, "default", 0, 5, now, None) for i in range(10, 10 + 3)])
    assert broker.client.llen(broker.keys.wake("default")) == 3
    broker.push([RunRef(i, "default", 0, 5, now, None) for i in range(100, 100 + 2 * WAKE_TOKENS)])
    assert broker.client.llen(broker.keys.wake("default")) == WAKE_TOKENS
    assert broker.client.llen(broker.keys.wake("other")) == 0
    # Each wait takes one token; one over several queues (one slot on a cluster) too.
    assert broker.wait_ready(["other", "default"], 5.0) is True
    assert broker.client.llen(broker.keys.wake("default")) == WAKE_TOKENS - 1


def test_an_idle_worker_starts_a_pushed_run_without_sleeping_out_its_poll(redis_kind,
                                                                          settings):
    """With a poll of 60 s, a worker that found nothing and went idle starts a job created
    a moment later at once: the push wakes it (before, it slept out the poll). The bound
    is the poll's quarter, not a speed: a woken worker takes milliseconds."""
    import threading

    from jobs.services import create_job

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "redis", "WORKER_POLL_S": 60.0}
    made = []

    def create_soon():
        from django.db import connection

        time.sleep(1.0)  # the worker's first lease has come back empty by then
        try:
            made.append(create_job("wake.noop"))
        finally:
            connection.close()

    creator = threading.Thread(target=create_soon)
    began = time.monotonic()
    creator.start()
    Worker(["default"], concurrency=1, max_runs=1).serve()
    waited = time.monotonic() - began
    creator.join()

    run = made[0].runs.get()
    assert run.state == "succeeded"
    assert waited < 15, f"the worker slept {waited:.1f} s: the push did not wake it"


def test_a_wait_longer_than_the_redis_socket_timeout_returns_instead_of_failing(redis_kind):
    """A WORKER_POLL_S above the Redis client's socket_timeout (5 s) made the idle BLPOP
    outlast it: redis-py gave up on the reply and the wait failed as "Redis unreachable"
    (a warning and a second's pause each time). The wait is cut to WAKE_WAIT_MAX_S."""
    from runs.brokers import get_broker
    from runs.brokers.redis.wake import WAKE_WAIT_MAX_S

    broker = get_broker("default", name="redis")
    assert WAKE_WAIT_MAX_S < 5
    assert broker.wait_ready(["default"], 6.0) is True


def test_a_run_due_within_a_blocked_wait_leaves_a_token_and_one_due_later_none(redis_kind):
    """A worker blocked in BLPOP comes back up to WAIT_SLACK_S after its timeout: a push
    of a run due before the wait could end wakes it, to wait for that run exactly."""
    from datetime import timedelta

    from django.utils import timezone

    from runs.brokers import get_broker
    from runs.types import RunRef

    broker = get_broker("default", name="redis")
    now = timezone.now()
    broker.push([RunRef(1, "default", 0, 5, now + timedelta(milliseconds=60), None)])
    assert broker.client.llen(broker.keys.wake("default")) == 1
    broker.push([RunRef(2, "default", 0, 5, now + timedelta(seconds=3), None)])
    assert broker.client.llen(broker.keys.wake("default")) == 1


def test_a_worker_whose_next_run_falls_due_within_its_wait_sleeps_to_it_not_in_redis(
        redis_kind, settings):
    """Redis checks a BLPOP's timeout at its ticks (10 a second by default): a worker
    that blocked there for a run due in 0.3 s started it up to 100 ms late. Its lease
    lane sleeps to that instant itself and leases the run then, never before its time
    (runs/worker/lease_ahead.py, lease_at)."""
    from jobs.services import create_job
    from runs.models import Run

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "redis", "WORKER_POLL_S": 0.5}
    run = create_job("wake.noop", delay_s=0.3).runs.get()
    worker = Worker(["default"], concurrency=1)

    leased, due_in = worker.lease.lease_call(1)

    assert ([one.lease.run_id for one in leased], due_in) == ([run.pk], None)
    started = Run.objects.get(pk=run.pk)
    assert started.state == "running" and started.started_at >= started.scheduled_at


def test_a_push_stands_when_its_wake_tokens_cannot_be_written(redis_kind):
    """On a cluster the wake lists' slot may sit on a master that is down while the
    queue's is up: the push failed with it. Here the list's key holds a string, so the
    tokens' LPUSH is refused (WRONGTYPE) and the push must stand."""
    from datetime import timedelta

    from django.utils import timezone

    from runs.brokers import get_broker
    from runs.types import RunRef

    broker = get_broker("default", name="redis")
    broker.client.set(broker.keys.wake("default"), "not a list")
    # A second ago: ready by Redis's clock too, not a delayed run.
    broker.push([RunRef(7, "default", 0, 5, timezone.now() - timedelta(seconds=1), None)])

    assert broker.client.zcard(broker.keys.ready("default", 0)) == 1


def test_a_socket_timeout_under_the_wait_cuts_the_wait_instead_of_failing_it(redis_kind,
                                                                             settings):
    """A REDIS_URL's socket_timeout of 0.5 s made every idle wait of 1 s fail as "Redis
    unreachable": one wait blocks at most half the client's socket timeout."""
    from runs.brokers.redis import RedisBroker

    url = settings.REDIS_URL
    broker = RedisBroker(url=url + ("&" if "?" in url else "?") + "socket_timeout=0.5")

    assert broker.wait_ready(["default"], 1.0) is True


def test_a_wait_on_lists_that_cannot_be_read_returns_no_wait_instead_of_failing(db):
    """The lists are hints: on a cluster their master may be down while the queues' are
    up, and the idle worker's wait failed its lease every second. Unreadable (here no
    Redis at all on that port), the wait says it did not wait and the worker polls."""
    from runs.brokers.redis import RedisBroker

    broker = RedisBroker(url="redis://127.0.0.1:9/0")

    assert broker.wait_ready(["default"], 0.2) is False


def test_a_worker_told_to_stop_in_its_wait_passes_the_wake_on(redis_kind, settings):
    """A worker stopping while blocked on the wake lists took the token of a push and did
    not lease: another idle worker slept out its wait (up to WAKE_WAIT_MAX_S) before it
    started the run. The token now goes back, and the run stays ready for that worker."""
    import threading

    from jobs.services import create_job

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "redis", "WORKER_POLL_S": 5.0}
    worker = Worker(["default"], concurrency=1)
    wake = worker.broker.keys.wake("default")
    worker.broker.client.delete(wake)
    answer = []
    leasing = threading.Thread(target=lambda: answer.append(worker.lease.lease_call(1)))
    leasing.start()
    time.sleep(0.3)  # its first lease came back empty: it blocks on the wake list now
    worker.stopping = True
    job = create_job("wake.noop")
    leasing.join(timeout=10)

    assert answer and answer[0][0] == []
    assert worker.broker.client.llen(wake) == 1
    taken = Worker(["default"], concurrency=1).broker.lease(["default"], 1, "other:1")
    assert [lease.run_id for lease in taken] == [job.runs.get().pk]
