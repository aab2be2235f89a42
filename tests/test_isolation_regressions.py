"""Regressions found by an adversarial run against the isolation features (docs/isolation.md):
each test failed before its fix (stale acks uncounting another worker's lease, per-shard
class shares, stranded shards after lowering SHARDS, FAIR_SCAN=0, a worker hanging on a
bad setting, out-of-range and partial PUT /api/limits/, infinite rates)."""
from collections import Counter

import pytest
from django.contrib.auth.models import User

from jobs.models import OwnerPolicy
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.execution.transitions import run_refs
from runs.models import Run
from runs.tenancy.limits import owner_limits
from runs.types import Outcome
from tests.conftest import flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def rb(transactional_db):
    flush_redis()
    broker = get_broker("default", name="redis")  # cached across tests:
    broker._known_at = float("-inf")  # forget the shard list an earlier test saw
    yield broker
    flush_redis()


def queue_runs(broker, count, priority=5, shard=0, owner=None, queue="default"):
    runs = make_runs(broker.using, count, priority=priority, shard=shard, owner=owner,
                     queue=queue)
    broker.push(run_refs(Run.objects.using(broker.using).filter(pk__in=[r.pk for r in runs])))
    broker.promote()
    return runs


def test_fair_scan_zero_must_not_stop_all_leasing(rb, settings):
    """FAIR_SCAN is 'most runs one lease call may set aside'; 0 should mean 'park none',
    not 'lease none'."""
    settings.SCHEDULER = {"FAIR_SCAN": 0}
    queue_runs(rb, 3)
    assert len(rb.lease(["default"], 3, "w1")) == 3


def test_runs_of_a_shard_above_a_reduced_shards_count_are_still_run(rb, settings):
    """docs/isolation.md: change SHARDS 'with the system drained, or run a reconcile
    after'. After a reconcile the runs of shard 5 must be leasable with SHARDS=2."""
    settings.SCHEDULER = {"SHARDS": 8}
    queue_runs(rb, 3, shard=5)
    settings.SCHEDULER = {"SHARDS": 2}
    rb.reconcile()
    rb.promote()
    rb.unpark()
    leased = rb.lease(["default"], 3, "w1")
    assert len(leased) == 3, "runs in shard 5 are stranded once SHARDS drops to 2"


def test_high_priority_class_gets_its_share_across_shards(rb, settings):
    """Both classes backlogged: the 0-2 class should get ~70% of leases. With SHARDS=8
    and every high run in one shard (one handler, or one shard_key) it gets ~9%."""
    settings.SCHEDULER = {"SHARDS": 8, "PRIORITY_CLASSES": "0-2:70,3-6:25,7-9:5"}
    hi_shard = shard_of("tenant-urgent", 8)
    for s in range(8):
        queue_runs(rb, 200, priority=8, shard=s)
    queue_runs(rb, 500, priority=0, shard=hi_shard)
    prio = {}
    counts = Counter()
    for _ in range(100):
        leases = rb.lease(["default"], 4, "w1")
        ids = [lease.run_id for lease in leases]
        prio.update(Run.objects.filter(pk__in=ids).values_list("pk", "priority"))
        counts.update("hi" if prio[i] == 0 else "lo" for i in ids)
        rb.complete([Outcome(lease, "succeeded") for lease in leases])
    share = counts["hi"] / sum(counts.values())
    assert share > 0.6, f"high class got {share:.0%} of leases, expected ~70%"


def test_high_priority_run_is_leased_in_the_next_lease_call_with_shards(rb, settings):
    """docs/isolation.md: 'when a high-priority run arrives during a low-priority flood it
    is leased in the very next lease call'."""
    settings.SCHEDULER = {"SHARDS": 8}
    for s in range(8):
        queue_runs(rb, 50, priority=8, shard=s)
    for _ in range(3):
        rb.complete([Outcome(le, "succeeded") for le in rb.lease(["default"], 2, "w1")])
    hi_shard = (next(rb._rotation) + 4) % 8  # a shard the next call does not start at
    [hi] = queue_runs(rb, 1, priority=0, shard=hi_shard)
    leased = rb.lease(["default"], 2, "w1")
    assert hi.pk in [le.run_id for le in leased]


def _limit(broker, owner, n):
    OwnerPolicy.objects.create(owner=owner, max_running=n)
    broker.sync_limits(owner_limits())


def _expire_and_release_to(broker, worker_b):
    import time
    time.sleep(0.4)
    assert broker.reap() == 1          # A's lease expired: retried
    for _ in range(50):
        broker.promote()
        leased = broker.lease(["default"], 1, worker_b)
        if leased:
            return leased
        time.sleep(0.05)
    raise AssertionError("the retried run was never leased again")


def test_a_stale_ack_does_not_uncount_the_new_holders_lease(rb, settings):
    """Worker A's lease lapses (stalled), the run is retried and leased by worker B;
    A wakes up and acks: the ack is refused, but it must not remove B's lease from the
    leased set nor its count, or the owner's limit stops holding while B runs."""
    settings.SCHEDULER = {"RETRY_BACKOFF_BASE_S": 0.01, "RETRY_BACKOFF_CAP_S": 0.01}
    alice = User.objects.create_user("alice")
    _limit(rb, alice, 1)
    queue_runs(rb, 1, owner=alice)
    [stale] = rb.lease(["default"], 1, "worker-a", ttl_s=0.2)
    [held] = _expire_and_release_to(rb, "worker-b")
    assert held.run_id == stale.run_id
    queue_runs(rb, 2, owner=alice)
    assert rb.running_counts().get(f"o:{alice.pk}") == 1
    assert rb.complete([Outcome(stale, "succeeded")]) == [False]   # refused: stale
    assert rb.running_counts().get(f"o:{alice.pk}") == 1, "B's run is no longer counted"
    assert rb.lease(["default"], 1, "worker-c") == [], "limit 1, but a second run started"


def test_a_stale_release_does_not_uncount_the_new_holders_lease(rb, settings):
    """Same through release (a stalled worker that is then SIGTERMed)."""
    settings.SCHEDULER = {"RETRY_BACKOFF_BASE_S": 0.01, "RETRY_BACKOFF_CAP_S": 0.01}
    alice = User.objects.create_user("alice")
    _limit(rb, alice, 1)
    queue_runs(rb, 1, owner=alice)
    [stale] = rb.lease(["default"], 1, "worker-a", ttl_s=0.2)
    [held] = _expire_and_release_to(rb, "worker-b")
    assert held.run_id == stale.run_id
    queue_runs(rb, 2, owner=alice)
    rb.release([stale])
    assert rb.running_counts().get(f"o:{alice.pk}") == 1, "B's run is no longer counted"
    assert rb.lease(["default"], 1, "worker-c") == [], "limit 1, but a second run started"


@pytest.mark.parametrize("name", ["redis", "database"])
@pytest.mark.parametrize("rate", ["default=inf", "default=50:inf", "default=1e308:1e308"])
def test_an_infinite_rate_is_refused_clearly_or_means_no_limit(transactional_db, settings,
                                                               name, rate):
    """parse_queue_limits accepts 'inf' for rate and burst; leasing must then either work
    (no limit) or the setting must be refused with ImproperlyConfigured, not OverflowError."""
    from django.core.exceptions import ImproperlyConfigured
    flush_redis()
    broker = get_broker("default", name=name)
    settings.SCHEDULER = {"QUEUE_RATE": rate}
    queue_runs(broker, 3)
    try:
        got = broker.lease(["default"], 3, "w1")
    except ImproperlyConfigured:
        return
    finally:
        flush_redis()
    assert len(got) == 3


def test_a_worker_with_a_bad_isolation_setting_exits_instead_of_hanging(rb):
    """A bad PRIORITY_CLASSES (or QUEUE_CONCURRENCY / QUEUE_RATE / OWNER_CONCURRENCY)
    raises ImproperlyConfigured at the first lease; the worker prints it but never exits
    (its daemonic children ignore SIGTERM, so multiprocessing's exit handler waits for
    them forever), and SIGTERM does not stop it either: only SIGKILL does."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT, daemon_env
    env = daemon_env("redis", PRIORITY_CLASSES="0-9:0")
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "runworker", "--burst"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("runworker with PRIORITY_CLASSES=0-9:0 did not exit within 30 s")
    assert proc.returncode != 0
    assert b"PRIORITY_CLASSES" in out


def test_put_limits_with_a_huge_max_running_is_a_400_not_a_500(rb):
    """max_running is a PositiveIntegerField (PostgreSQL integer); the serializer has no
    max_value, so 2**31 reaches the database: NumericValueOutOfRange -> 500."""
    from rest_framework.test import APIClient
    staff = User.objects.create_superuser("ops")
    User.objects.create_user("alice")
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(staff)
    response = client.put("/api/limits/", {"owner": "alice", "max_running": 2**31},
                          format="json")
    assert response.status_code == 400
    assert not OwnerPolicy.objects.exists()


def test_put_limits_with_only_a_default_queue_keeps_the_limit(rb):
    """Design question: PUT is a full replace, so setting a tenant's default queue
    silently removes its concurrency limit (max_running defaults to null)."""
    from rest_framework.test import APIClient
    staff = User.objects.create_superuser("ops")
    User.objects.create_user("alice")
    client = APIClient()
    client.force_authenticate(staff)
    client.put("/api/limits/", {"owner": "alice", "max_running": 2}, format="json")
    body = client.put("/api/limits/", {"owner": "alice", "default_queue": "tenant-a"},
                      format="json").json()
    assert body["max_running"] == 2
