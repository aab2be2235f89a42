"""What differs on a Redis Cluster (docs/isolation.md, "Redis Cluster"): owner limits are
kept per queue there, copied into each queue's slot, also before a new queue's first
lease. The rest of the broker's behaviour on a cluster is the contract suite's fourth pair.
"""

import pytest
from django.contrib.auth.models import User

from runs.brokers import get_broker
from runs.execution.transitions import run_refs
from runs.models import Run
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True)


def queue_runs(broker, count, queue, owner):
    runs = make_runs("default", count, queue=queue, owner=owner)
    broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
    broker.promote()


def test_a_queue_first_pushed_after_the_sync_gets_the_owner_limits(redis_kind, settings):
    settings.SCHEDULER = {"OWNER_CONCURRENCY": 5}
    alice = User.objects.create_user("alice")
    broker = get_broker("default", name="redis")
    broker.sync_limits({alice.pk: 1})  # before "reports" exists in Redis

    queue_runs(broker, 3, "reports", alice)

    assert len(broker.lease(["reports"], 3, "w1")) == 1


def test_an_owners_limit_counts_every_queue_on_a_single_redis_and_each_on_a_cluster(
        redis_kind, settings):
    alice = User.objects.create_user("alice")
    broker = get_broker("default", name="redis")
    broker.sync_limits({alice.pk: 1})
    for queue in ("default", "reports"):
        queue_runs(broker, 2, queue, alice)

    leases = broker.lease(["default", "reports"], 4, "w1")

    per_queue = redis_kind == "redis_cluster"
    assert sorted(lease.queue for lease in leases) == (
        ["default", "reports"] if per_queue else ["default"])
    assert broker.running_counts()[f"o:{alice.pk}"] == len(leases)
