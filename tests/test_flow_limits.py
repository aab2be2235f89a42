"""Flow control by handler and by key (docs/isolation.md, "Rate limits" and "Concurrency
keys") on every broker/database pair: token buckets per handler and per rate key value,
concurrency slots per key value, held across callers, released at ack and at lease
expiry; the ways in refuse bad values naming the field; /metrics shows the limits."""

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connections, transaction
from django.test import Client
from django.utils import timezone

from jobs import services
from jobs.models import Job
from runs import services as run_services
from runs.flow import control as flow
from runs.flow import rate_limits as flow_limits
from runs.models import Run
from runs.types import Outcome
from scheduler_core.exceptions import InvalidJob
from tests import djtasks_tasks

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture(autouse=True)
def fresh_limits():
    """The limits cache is per process: no test sees another's limits."""
    flow.forget_cache("default")
    flow.forget_cache("sqlite")
    yield
    flow.forget_cache("default")
    flow.forget_cache("sqlite")
    flow.forget_use()  # the keyed jobs are gone: later tests continue runs again


def queue_keyed(broker, count, handler="noop", payload=None, owner=None, **keys) -> list[int]:
    """One job of ``owner`` (``keys``: rate_key, concurrency_key, concurrency_limit as
    templates) with ``count`` due runs, pushed; returns the run ids in creation order."""
    spec = {"handler": handler, "payload": payload or {}, **keys}
    clean = services.validate_specs([spec])[0]
    now = timezone.now()
    job = Job.objects.using(broker.using).create(
        name=handler, handler=handler, payload=clean["payload"], run_at=now,
        rate_key=clean["rate_key"], concurrency_key=clean["concurrency_key"],
        concurrency_limit=clean["concurrency_limit"], owner=owner)
    runs = Run.objects.using(broker.using).bulk_create([
        Run(job=job, scheduled_at=now + timedelta(microseconds=i), run_at=now,
            queue="default", priority=5, max_attempts=10, shard=0) for i in range(count)])
    ids = [r.pk for r in runs]
    broker._push_ids(ids)
    broker.promote()
    return ids


def lease_all(broker, n=100, ttl_s=None):
    return broker.lease(["default"], n, "w1", ttl_s=ttl_s)


def succeed(broker, leases):
    broker.complete([Outcome(lease, "succeeded") for lease in leases])


def set_limit(broker, scope, name, rate, burst=None):
    flow_limits.set_rate_limit(scope, name, rate, burst, using=broker.using)


# --- rate limits ------------------------------------------------------------------------

def test_a_handler_rate_limit_is_a_token_bucket(broker):
    set_limit(broker, "handler", "noop", 5, 5)
    queue_keyed(broker, 40)
    assert len(lease_all(broker)) == 5  # the full bucket
    assert lease_all(broker) == []
    time.sleep(1.0)
    assert 4 <= len(lease_all(broker)) <= 6
    # Deferred, not lost: every run is still waiting.
    waiting = Run.objects.using(broker.using).filter(state__in=["queued", "scheduled"])
    assert waiting.count() >= 29


def test_a_key_rate_limit_keeps_one_bucket_per_value(broker):
    set_limit(broker, "key", "payload.customer", 2, 2)
    queue_keyed(broker, 10, payload={"customer": "a"}, rate_key="payload.customer")
    queue_keyed(broker, 10, payload={"customer": "b"}, rate_key="payload.customer")
    leases = lease_all(broker)
    jobs = Run.objects.using(broker.using).filter(pk__in=[x.run_id for x in leases])
    assert sorted(jobs.values_list("job__rate_key", flat=True)) == [
        "payload.customer=a", "payload.customer=a", "payload.customer=b",
        "payload.customer=b"]


def test_a_rate_limited_handler_holds_up_no_other_handler(broker):
    set_limit(broker, "handler", "noop", 1, 1)
    queue_keyed(broker, 20)
    queue_keyed(broker, 5, handler="echo")
    leased = Run.objects.using(broker.using).filter(
        pk__in=[x.run_id for x in lease_all(broker)])
    assert sorted(leased.values_list("job__handler", flat=True)) == ["echo"] * 5 + ["noop"]


def test_a_changed_limit_takes_effect_at_once(broker):
    set_limit(broker, "handler", "noop", 1, 1)
    queue_keyed(broker, 30)
    assert len(lease_all(broker)) == 1
    set_limit(broker, "handler", "noop", 1000, 10)
    time.sleep(0.3)  # the runs deferred by the old limit fall due within a second
    got = len(lease_all(broker))
    deadline = time.monotonic() + 2
    while got < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
        got += len(lease_all(broker))
    assert got >= 10
    flow_limits.delete_rate_limit("handler", "noop", using=broker.using)
    deadline = time.monotonic() + 3
    while got < 29 and time.monotonic() < deadline:
        time.sleep(0.1)
        got += len(lease_all(broker))
    assert got == 29


# --- concurrency keys ---------------------------------------------------------------------

def test_a_concurrency_key_caps_running_runs_per_value_in_order(broker):
    a = queue_keyed(broker, 6, payload={"c": "a"}, concurrency_key="payload.c",
                    concurrency_limit=2)
    b = queue_keyed(broker, 6, payload={"c": "b"}, concurrency_key="payload.c",
                    concurrency_limit=2)
    first = lease_all(broker)
    assert sorted(x.run_id for x in first) == sorted(a[:2] + b[:2])
    assert lease_all(broker) == []
    succeed(broker, [x for x in first if x.run_id == a[0]])
    broker.unpark()
    assert [x.run_id for x in lease_all(broker)] == [a[2]]  # the next of key a, in order
    assert lease_all(broker) == []


def test_concurrency_slots_come_back_when_a_lease_expires(broker):
    ids = queue_keyed(broker, 5, payload={"c": "x"}, concurrency_key="payload.c",
                      concurrency_limit=2)
    assert len(lease_all(broker, ttl_s=0.5)) == 2  # a worker takes two, then dies
    assert lease_all(broker) == []
    time.sleep(1.2)
    broker.reap()  # the lease reaper releases the dead worker's slots
    broker.unpark()
    again = lease_all(broker)
    assert len(again) == 2
    assert {x.run_id for x in again} <= set(ids)


def two_slots_lapsed_in_redis(broker) -> list:
    """Four runs of a key of limit 2, two of them leased for 60 s, whose claims' expiry
    has passed in Redis (not in the database); returns the two leases. Skips the
    database broker, whose slots are its running rows."""
    if broker.name == "database":
        pytest.skip("the database broker's slots are its running rows")
    queue_keyed(broker, 4, payload={"c": "x"}, concurrency_key="payload.c",
                concurrency_limit=2)
    held = lease_all(broker, ttl_s=60)
    assert len(held) == 2
    for lease in held:
        broker.client.zadd(broker.keys.leased(lease.queue, lease.shard),
                           {str(lease.run_id): 0}, xx=True)
    return held


def test_a_slot_stays_taken_while_the_database_still_holds_the_lease(broker):
    """Redis stamps a claim's expiry before the database starts the run, so it can lapse
    first: the reaper must not free the slot while the run's attempt is still open."""
    held = two_slots_lapsed_in_redis(broker)
    broker.reap()
    broker.unpark()
    assert lease_all(broker) == []

    Run.objects.using(broker.using).filter(pk__in=[x.run_id for x in held]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1))
    broker.reap()
    broker.unpark()
    assert len(lease_all(broker)) == 2


def test_a_slot_stays_taken_until_the_database_reap_closes_the_attempt(broker):
    """The database's lease expired, but its reap has not closed the attempt yet (another
    dispatcher holds the row, or it expired after this pass's own reap): freeing the slot
    then let a third run of a key of limit 2 start beside two open attempts (the
    flow-kill chaos scenario)."""
    held = two_slots_lapsed_in_redis(broker)
    Run.objects.using(broker.using).filter(pk__in=[x.run_id for x in held]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1))
    # Another dispatcher's reap is closing these rows: this one's skips them.
    with transaction.atomic(using=broker.using):
        list(Run.objects.using(broker.using).filter(pk__in=[x.run_id for x in held])
             .select_for_update())
        with ThreadPoolExecutor(1) as pool:
            pool.submit(_reap_elsewhere, broker).result()
    broker.unpark()
    assert lease_all(broker) == []

    broker.reap()
    broker.unpark()
    assert len(lease_all(broker)) == 2


@pytest.mark.parametrize("limit", ["queue", "owner", "key"])
def test_a_run_cancelled_while_running_frees_its_slot_at_its_ack(settings, broker, limit):
    """A run cancelled while running gave its slot (queue, owner or concurrency key) back
    only when its broker-side lease lapsed (LEASE_TTL_S): its worker's ack is refused,
    and a refused ack's slots were left to the reaper. A tenant cancelling its runs as
    they start kept the others' runs waiting (docs/isolation.md, "Concurrency limits")."""
    from django.contrib.auth.models import User

    settings.SCHEDULER = {"OWNER_CONCURRENCY": 2 if limit == "owner" else 0,
                          "QUEUE_CONCURRENCY": "default=2" if limit == "queue" else ""}
    tenant = User.objects.db_manager(broker.using).create_user("tenant")
    keys = {"concurrency_key": "payload.c", "concurrency_limit": 2} if limit == "key" else {}
    queue_keyed(broker, 4, payload={"c": "x"}, owner=tenant, **keys)
    held = lease_all(broker, ttl_s=60)
    assert len(held) == 2
    assert lease_all(broker) == []
    assert run_services.cancel([x.run_id for x in held], using=broker.using) == 2
    # The worker stops the handlers and sends their outcomes: refused, as the runs are
    # cancelled, yet the slots are theirs alone.
    assert broker.complete([Outcome(x, "cancelled") for x in held]) == [False, False]
    broker.unpark()
    assert len(lease_all(broker)) == 2


def test_a_late_ack_of_a_cancelled_attempt_frees_no_slot_of_a_later_one(settings, broker):
    """A cancelled run requeued and leased again holds its slot under the new attempt,
    cancelled in turn or not: only that attempt's own ack frees it, once its handler has
    stopped, never the older attempt's ack coming late."""
    settings.SCHEDULER = {"OWNER_CONCURRENCY": 0}
    keys = {"payload": {"c": "x"}, "concurrency_key": "payload.c", "concurrency_limit": 1}
    [run_id] = queue_keyed(broker, 1, **keys)
    [first] = lease_all(broker, ttl_s=60)
    assert run_services.cancel([run_id], using=broker.using) == 1
    assert run_services.requeue([run_id], using=broker.using) == 1
    broker._push_ids([run_id])
    broker.promote()
    [again] = lease_all(broker, ttl_s=60)
    assert (again.run_id, again.attempt) == (run_id, first.attempt + 1)
    queue_keyed(broker, 1, **keys)
    assert broker.complete([Outcome(first, "cancelled")]) == [False]
    broker.unpark()
    assert lease_all(broker) == []
    assert run_services.cancel([run_id], using=broker.using) == 1
    assert broker.complete([Outcome(first, "cancelled")]) == [False]
    if broker.name != "database":  # whose slots are its running rows: the cancel's
        broker.unpark()
        assert lease_all(broker) == []  # the second attempt's handler may still run
    assert broker.complete([Outcome(again, "cancelled")]) == [False]
    broker.unpark()
    assert len(lease_all(broker)) == 1


def _reap_elsewhere(broker) -> None:
    try:
        broker.reap()
    finally:
        connections.close_all()


def test_owners_sharing_a_key_value_share_no_slot_and_no_bucket(broker):
    """Keys were counted by value alone: a tenant's runs under another's customer id
    held its slots (and its own limit of 100,000 ignored the other's 1)."""
    from django.contrib.auth.models import User

    alice, bob = (User.objects.db_manager(broker.using).create_user(name)
                  for name in ("alice", "bob"))
    keys = {"concurrency_key": "payload.c", "rate_key": "payload.c"}
    set_limit(broker, "key", "payload.c", 0.001, 1)  # one start per value, then none
    hogs = queue_keyed(broker, 3, payload={"c": "acme"}, owner=alice,
                       concurrency_limit=100_000, **keys)
    mine = queue_keyed(broker, 3, payload={"c": "acme"}, owner=bob, concurrency_limit=1,
                       **keys)
    leased = {x.run_id for x in lease_all(broker)}
    assert leased == {hogs[0], mine[0]}  # one token each: the buckets are the owners'
    assert lease_all(broker) == []


def test_a_concurrency_key_holds_up_no_other_run(broker):
    queue_keyed(broker, 10, payload={"c": "x"}, concurrency_key="payload.c")
    queue_keyed(broker, 3, handler="echo")
    leased = Run.objects.using(broker.using).filter(
        pk__in=[x.run_id for x in lease_all(broker)])
    assert sorted(leased.values_list("job__handler", flat=True)) == ["echo"] * 3 + ["noop"]


# --- the ways in ----------------------------------------------------------------------------

@pytest.mark.parametrize("values, field", [
    ({"rate_key": "payload.missing"}, "rate_key"),
    ({"rate_key": "customer id"}, "rate_key"),
    ({"concurrency_key": "payload.c", "payload": {"c": [1]}}, "concurrency_key"),
    ({"concurrency_key": "payload.c", "payload": {"c": 1}, "concurrency_limit": 0},
     "concurrency_limit"),
    ({"concurrency_limit": 2}, "concurrency_limit"),  # no key: it would limit nothing
    ({"rate_key": "payload.c", "payload": {"c": "a\u202eb"}}, "rate_key"),  # bidi override
    ({"concurrency_key": "payload.c", "payload": {"c": "a\x85b"}}, "concurrency_key"),
])
def test_bad_flow_keys_are_refused_naming_the_field(api, values, field):
    answer = api.post("/api/jobs/", {"handler": "noop", **values}, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()
    with pytest.raises(InvalidJob) as caught:
        services.create_job("noop", values.get("payload"),
                            **{k: v for k, v in values.items() if k != "payload"})
    assert field in caught.value.errors


def test_a_job_carries_its_key_values_through_rest(api):
    answer = api.post("/api/jobs/", {"handler": "noop", "payload": {"customer_id": 42},
                                     "rate_key": "payload.customer_id",
                                     "concurrency_key": "handler",
                                     "concurrency_limit": 3}, format="json")
    assert answer.status_code == 201, answer.content
    job = Job.objects.get(pk=answer.json()["id"])
    assert (job.rate_key, job.concurrency_key, job.concurrency_limit) == (
        "payload.customer_id=42", "handler=noop", 3)
    assert answer.json()["rate_key"] == "payload.customer_id=42"
    changed = api.patch(f"/api/jobs/{job.pk}/", {"payload": {"customer_id": 7}}, format="json")
    assert changed.status_code == 200, changed.content
    job.refresh_from_db()
    assert job.rate_key == "payload.customer_id=7"


@pytest.mark.parametrize("body, field", [
    ({"scope": "queue", "name": "noop", "rate": 5}, "scope"),
    ({"scope": "handler", "name": "noop", "rate": 0}, "rate"),
    ({"scope": "handler", "name": "noop", "rate": "fast"}, "rate"),
    ({"scope": "handler", "name": "noop", "rate": 5, "burst": 0.5}, "burst"),
    ({"scope": "key", "name": "customer id", "rate": 5}, "name"),
    ({"scope": "handler", "name": "nope.nope", "rate": 1}, "name"),  # no such handler
    ({"scope": "handler", "name": "noop", "rate": 1e-300}, "rate"),  # deferred for ever
    ({"scope": "handler", "name": "noop", "rate": 5, "burts": 3}, "burts"),
    ({"scope": "handler", "name": "noop", "rate": 5, "updated_at": "x"}, "updated_at"),
])
def test_bad_rate_limits_are_400s_naming_the_field(api, alice, body, field):
    alice.user_permissions.add(*Permission.objects.filter(
        codename__in=["change_ratelimit", "add_ratelimit"]))
    answer = api.put("/api/limits/rates/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()


def test_setting_a_rate_limit_needs_the_permission(api, alice):
    body = {"scope": "handler", "name": "noop", "rate": 5}
    assert api.put("/api/limits/rates/", body, format="json").status_code == 403
    alice.user_permissions.add(Permission.objects.get(codename="change_ratelimit"))
    # Changing is not adding: a new limit needs runs.add_ratelimit (an adversarial pass).
    new = api.put("/api/limits/rates/", body, format="json")
    assert new.status_code == 403 and "add_ratelimit" in new.json()["detail"]
    alice.user_permissions.add(Permission.objects.get(codename="add_ratelimit"))
    alice = type(alice).objects.get(pk=alice.pk)  # drop the cached permissions
    answer = api.put("/api/limits/rates/", body, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["burst"] == 5.0
    listed = api.get("/api/limits/rates/").json()
    assert [(r["scope"], r["name"], r["rate"]) for r in listed] == [("handler", "noop", 5.0)]
    assert api.delete("/api/limits/rates/?scope=handler&name=noop").status_code == 403


def test_metrics_show_the_limits(settings, db):
    settings.SCHEDULER = {**getattr(settings, "SCHEDULER", {}), "METRICS_OPEN": True,
                          "METRICS_TOKEN": ""}
    flow_limits.set_rate_limit("handler", "noop", 50, 10)
    services.create_job("noop", {"c": "a"}, concurrency_key="payload.c", delay_s=60)
    text = Client().get("/metrics").content.decode()
    assert 'scheduler_rate_limit_per_second{name="noop",scope="handler"} 50.0' in text
    assert 'scheduler_rate_limit_burst{name="noop",scope="handler"} 10.0' in text
    assert 'scheduler_concurrency_key_runs{state="waiting",template="payload.c"} 1.0' in text


def test_the_admin_sets_and_removes_a_rate_limit(admin_client):
    page = "/admin/runs/ratelimit/add/"
    refused = admin_client.post(page, {"scope": "handler", "name": "noop", "rate": "0"})
    assert refused.status_code == 200 and b"runs per second from" in refused.content
    added = admin_client.post(page, {"scope": "handler", "name": "noop", "rate": "20"})
    assert added.status_code == 302, added.content[:2000]
    assert flow.rate_limits() == {("handler", "noop"): (20.0, 20.0)}
    limit = flow_limits.RateLimit.objects.get()
    # Its scope and name are what it is: a change cannot rename it away (an adversarial
    # pass removed a limit with the change permission alone that way).
    admin_client.post(f"/admin/runs/ratelimit/{limit.pk}/change/",
                      {"scope": "handler", "name": "zzz", "rate": "30"})
    flow.forget_cache()
    assert flow.rate_limits() == {("handler", "noop"): (30.0, 30.0)}  # burst: 1 s worth
    admin_client.post(f"/admin/runs/ratelimit/{limit.pk}/delete/", {"post": "yes"})
    flow.forget_cache()
    assert flow.rate_limits() == {}


@pytest.mark.parametrize("using", ["default", "sqlite"])
def test_create_jobs_stores_the_keys_evaluated(using):
    created = services.create_jobs([
        {"handler": "noop", "payload": {"c": i}, "concurrency_key": "payload.c",
         "concurrency_limit": 2, "rate_key": "name", "name": f"n{i}"} for i in range(3)
    ] + [{"handler": "noop", "cron": "@daily", "rate_key": "handler"}], using=using)
    stored = Job.objects.using(using).filter(pk__in=[j.pk for j in created]).order_by("pk")
    assert [(j.rate_key, j.concurrency_key, j.concurrency_limit) for j in stored] == [
        ("name=n0", "payload.c=0", 2), ("name=n1", "payload.c=1", 2),
        ("name=n2", "payload.c=2", 2), ("handler=noop", "", 1)]


def test_a_task_takes_the_flow_keys_as_options(settings, db):
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "QUEUES": [], "OPTIONS": {}}}
    keyed = dataclasses.replace(djtasks_tasks.add, concurrency_key="payload.kwargs.b",
                                concurrency_limit=3, rate_key="payload.task")
    result = keyed.enqueue(1, b=2)
    job = Run.objects.get(pk=int(result.id)).job
    assert (job.concurrency_key, job.concurrency_limit) == ("payload.kwargs.b=2", 3)
    assert job.rate_key == "payload.task=tests.djtasks_tasks.add"
