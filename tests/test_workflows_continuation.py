"""Continuations on every broker/database pair (runs/execution/continuation.py, docs/workflows.md
"Latency"): the ack of a node's run leases its downstream run to the acking worker in the
same transaction, as a lease would (attempt row, expiry, the broker's leased set and
counters), and only where the lease's rules allow; a continued run whose worker dies is
reaped and retried like any lease."""

import time

import pytest

from jobs.registry import handler
from runs.execution.continuation import Offer
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.types import Outcome
from workflows import services
from workflows.models import NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("wf.cont")
def noop(ctx, payload):
    return None


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


def chain(broker, *names, queue="default"):
    """A started workflow run of nodes ``names`` one after the other; returns it."""
    nodes = [{"name": n, "handler": "wf.cont", "payload": {}, "queue": queue} for n in names]
    edges = list(zip(names, names[1:], strict=False))
    workflow = services.create_workflow("c", nodes, edges, using=broker.using)
    return services.start_workflow_run(workflow, using=broker.using)


def lease_first(broker, worker="w1", queue="default"):
    broker.promote()
    [lease] = broker.lease([queue], 1, worker)
    return lease


def run_of(broker, workflow_run, name) -> Run | None:
    run_id = NodeRun.objects.using(broker.using).get(
        workflow_run=workflow_run, node__name=name).run_id
    return Run.objects.using(broker.using).filter(pk=run_id).first()


def running_count(broker, queue="default") -> int:
    """The broker's count of the queue's leased runs (Redis; 0 elsewhere)."""
    if broker.name != "redis":
        return 0
    return int(broker.client.hget(broker.keys.running(queue), f"q:{queue}") or 0)


def test_the_ack_leases_the_downstream_run_to_the_acking_worker(pair):
    broker = pair
    workflow_run = chain(broker, "a", "b")
    lease = lease_first(broker)
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)

    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer) == [True]

    b = run_of(broker, workflow_run, "b")
    assert (b.state, b.attempt, b.worker_id) == (RunState.RUNNING, 1, "w1")
    assert b.lease_expires_at is not None
    attempt = Attempt.objects.using(broker.using).get(run=b, number=1)
    assert (attempt.worker_id, attempt.outcome) == ("w1", AttemptOutcome.RUNNING)
    [(taken, owner)] = offer.taken
    assert (taken.run_id, taken.attempt, owner, offer.pushed) == (b.pk, 1, None, 0)
    if broker.name == "redis":
        assert broker.client.zscore(broker.keys.leased("default", taken.shard),
                                    str(b.pk)) is not None
    assert running_count(broker) == (1 if broker.name == "redis" else 0)
    # Nobody else can lease it: it is in no ready set, and the row is running.
    assert broker.lease(["default"], 10, "w2") == []

    assert broker.complete([Outcome(taken, AttemptOutcome.SUCCEEDED)], None) == [True]
    assert running_count(broker) == 0
    state = WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state
    assert state == "succeeded"


def test_a_continued_run_whose_worker_died_is_reaped_and_runs_again(pair):
    broker = pair
    workflow_run = chain(broker, "a", "b")
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=0.3)
    broker.complete([Outcome(lease_first(broker), AttemptOutcome.SUCCEEDED)], offer)
    [(dead, _)] = offer.taken

    time.sleep(0.5)  # w1 never heartbeats: SIGKILLed
    assert broker.reap() == 1
    b = run_of(broker, workflow_run, "b")
    assert b.state in (RunState.RETRYING, RunState.QUEUED)  # the database broker's push
    expired = Attempt.objects.using(broker.using).get(run=b, number=1)
    assert expired.outcome == AttemptOutcome.LEASE_EXPIRED
    assert running_count(broker) == 0
    time.sleep(0.1)  # its retry's backoff

    again = lease_first(broker, "w2")
    assert (again.run_id, again.attempt) == (b.pk, 2)
    assert broker.complete([Outcome(dead, AttemptOutcome.SUCCEEDED)]) == [False]
    assert broker.complete([Outcome(again, AttemptOutcome.SUCCEEDED)]) == [True]
    state = WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state
    assert state == "succeeded"


@pytest.mark.parametrize("why", ["queue not served", "queue limit", "room"])
def test_no_continuation_where_a_lease_would_apply_a_rule(pair, settings, why):
    broker = pair
    queues = frozenset({"other"} if why == "queue not served" else {"default"})
    if why == "queue limit":
        settings.SCHEDULER = {**settings.SCHEDULER, "QUEUE_CONCURRENCY": "default=5"}
    workflow_run = chain(broker, "a", "b")
    offer = Offer("w1", queues, room=0 if why == "room" else 1, ttl_s=30.0)

    broker.complete([Outcome(lease_first(broker), AttemptOutcome.SUCCEEDED)], offer)

    assert offer.taken == []
    b = run_of(broker, workflow_run, "b")
    assert b.state in (RunState.SCHEDULED, RunState.QUEUED)
    assert lease_first(broker, "w2").run_id == b.pk


def test_a_worker_at_its_max_runs_takes_no_continuation(pair):
    """A worker whose last run (max_runs) is being acked has no child left to run a
    continued run: the downstream run must go to the broker for other workers, not be
    leased to this one only to be released as it stops."""
    from runs.worker import Worker

    broker = pair
    workflow_run = chain(broker, "a", "b")
    broker.promote()
    Worker(["default"], concurrency=1, using=broker.using, max_runs=1).serve()

    b = run_of(broker, workflow_run, "b")
    assert run_of(broker, workflow_run, "a").state == RunState.SUCCEEDED
    assert list(Attempt.objects.using(broker.using).filter(run=b).values_list(
        "worker_id", "outcome")) == []
    assert (b.state, b.attempt) in ((RunState.SCHEDULED, 0), (RunState.QUEUED, 0))


def test_no_continuation_while_a_more_urgent_run_waits_in_the_queue(pair, settings):
    from runs.execution import transitions
    from tests.conftest import make_runs

    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "PRIORITY_CLASSES": ""}  # strict order
    nodes = [{"name": n, "handler": "wf.cont", "payload": {}, "priority": 9} for n in "ab"]
    workflow = services.create_workflow("low", nodes, [("a", "b")], using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    lease = lease_first(broker)
    [urgent] = make_runs(broker.using, 1, handler="wf.cont", priority=0)
    broker.push(transitions.run_refs(Run.objects.using(broker.using).filter(pk=urgent.pk)))
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)

    broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer)

    assert run_of(broker, workflow_run, "b").state != RunState.RUNNING
    assert offer.taken == []
    assert lease_first(broker).run_id == urgent.pk


def low_chain_with_a_waiting_run(broker, priority, queue="default"):
    """A started chain a -> b of priority 5, a leased, and one run of ``priority`` in
    ``queue`` pushed and waiting; returns (workflow run, a's lease, the waiting run)."""
    from runs.execution import transitions
    from tests.conftest import make_runs

    nodes = [{"name": n, "handler": "wf.cont", "payload": {}, "priority": 5} for n in "ab"]
    workflow = services.create_workflow("mid", nodes, [("a", "b")], using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    lease = lease_first(broker)
    [waiting] = make_runs(broker.using, 1, handler="wf.cont", priority=priority, queue=queue)
    broker.push(transitions.run_refs(Run.objects.using(broker.using).filter(pk=waiting.pk)))
    return workflow_run, lease, waiting


@pytest.mark.parametrize("why", ["same priority", "less urgent", "another queue"])
def test_a_waiting_run_no_more_urgent_in_the_queue_leaves_the_continuation(pair, settings,
                                                                            why):
    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "PRIORITY_CLASSES": ""}
    priority = {"same priority": 5, "less urgent": 8, "another queue": 0}[why]
    queue = "other" if why == "another queue" else "default"
    workflow_run, lease, waiting = low_chain_with_a_waiting_run(broker, priority, queue)
    offer = Offer("w1", frozenset({"default", "other"}), room=1, ttl_s=30.0)

    broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer)

    b = run_of(broker, workflow_run, "b")
    assert (b.state, b.worker_id) == (RunState.RUNNING, "w1")
    assert [taken.run_id for taken, _ in offer.taken] == [b.pk]
    assert lease_first(broker, queue=queue).run_id == waiting.pk


def test_a_broker_that_cannot_tell_what_waits_continues_nothing_and_the_ack_stands(pair):
    """The read of what waits fails (a Redis down for a moment, say): the ack is applied,
    the downstream run goes to the broker for a lease in order, nothing is continued."""
    from scheduler_core.exceptions import BrokerUnavailable

    broker = pair
    if broker.ready_when_stored:
        pytest.skip("the database broker's ready runs are rows of the ack's own database")
    workflow_run = chain(broker, "a", "b")
    lease = lease_first(broker)

    def unreadable(queues):
        raise BrokerUnavailable("the broker's ready sets cannot be read")

    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0, ready_head=unreadable)
    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer) == [True]

    assert offer.taken == []
    assert run_of(broker, workflow_run, "a").state == RunState.SUCCEEDED
    b = run_of(broker, workflow_run, "b")
    assert b.state in (RunState.SCHEDULED, RunState.QUEUED)
    assert lease_first(broker, "w2").run_id == b.pk


@pytest.mark.parametrize("why", ["queue rate", "owner default limit", "owner policy"])
def test_no_continuation_for_a_rate_limited_queue_or_a_limited_owner(pair, settings, why):
    from django.contrib.auth.models import User

    from jobs.tenants import set_owner_policy

    broker = pair
    limits = {"queue rate": {"QUEUE_RATE": "default=100", "OWNER_CONCURRENCY": 0},
              "owner default limit": {"OWNER_CONCURRENCY": 3},
              "owner policy": {"OWNER_CONCURRENCY": 0}}[why]
    settings.SCHEDULER = {**settings.SCHEDULER, **limits}
    owner = User.objects.db_manager(broker.using).create_user("tenant")
    if why == "owner policy":
        set_owner_policy(owner, max_running=5, using=broker.using)
    nodes = [{"name": n, "handler": "wf.cont", "payload": {}} for n in "ab"]
    workflow = services.create_workflow("t", nodes, [("a", "b")], owner=owner,
                                         using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)

    broker.complete([Outcome(lease_first(broker), AttemptOutcome.SUCCEEDED)], offer)

    assert offer.taken == []
    b = run_of(broker, workflow_run, "b")
    assert b.state in (RunState.SCHEDULED, RunState.QUEUED)
    assert lease_first(broker, "w2").run_id == b.pk


def test_a_worker_killed_after_the_ack_committed_but_before_adopt_loses_nothing(pair,
                                                                               settings):
    """SIGKILL between the ack's commit and the broker's record of the continued lease
    (adopt): the database holds a lease the broker never heard of. The reap must retry
    it, and the broker's leased set and counters must come out empty at the end."""
    from runs.execution import completion, continuation

    broker = pair
    workflow_run = chain(broker, "a", "b")
    # Short leases: the kill also skips the forget of a's own lease after the commit,
    # which the broker's reap of lapsed claims takes back (LEASE_TTL_S), as for any
    # worker killed there.
    settings.SCHEDULER = {**settings.SCHEDULER, "LEASE_TTL_S": 1.0}
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=1.0)
    lease = lease_first(broker)
    with continuation.offering(offer):  # the ack's transaction, then the kill
        completion.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], broker.using)
    [(dead, _)] = offer.taken
    if broker.name == "redis":
        assert broker.client.zscore(broker.keys.leased("default", dead.shard),
                                    str(dead.run_id)) is None

    time.sleep(1.3)
    assert broker.reap() == 1
    time.sleep(0.1)  # the retry's backoff
    again = lease_first(broker, "w2")
    assert (again.run_id, again.attempt) == (dead.run_id, 2)
    assert broker.complete([Outcome(again, AttemptOutcome.SUCCEEDED)]) == [True]
    assert WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state == "succeeded"
    assert running_count(broker) == 0
    if broker.name == "redis":
        assert broker.client.zcard(broker.keys.leased("default", dead.shard)) == 0
        assert broker.client.hgetall(broker.keys.running("default")) == {}


def ack_queries(broker, owner, width: int) -> int:
    """Database queries of the ack of a fan-out root of ``width`` nodes, offering one."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    # The root outranks the nodes an earlier call left in the queue (strict priority).
    nodes = [{"name": "root", "handler": "wf.cont", "payload": {}, "priority": 3}] + [
        {"name": f"n{i}", "handler": "wf.cont", "payload": {}} for i in range(width)]
    workflow = services.create_workflow(f"f{width}", nodes,
                                        [("root", f"n{i}") for i in range(width)],
                                        owner=owner, using=broker.using)
    services.start_workflow_run(workflow, using=broker.using)
    lease = lease_first(broker)
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    with CaptureQueriesContext(connections[broker.using]) as queries:
        broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer)
    assert len(offer.taken) == 1
    for lease, _ in offer.taken:  # out of the way of the next fan-out's root
        broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)])
    return len(queries)


@pytest.mark.parametrize("path", ["one call", "orm"])
def test_an_acks_queries_do_not_grow_with_its_fan_out(pair, settings, monkeypatch, path):
    # The owner policies are read once per ack (the offer keeps them), not once per run the
    # ack made ready: in the one call's SQL, and on the ORM path
    # (runs/execution/continuation.py).
    from django.contrib.auth.models import User

    from workflows.execution import ack_pg

    broker = pair
    if broker.using != "default":
        pytest.skip("SQLite points node runs at their runs one statement each, by design")
    if path == "orm":
        monkeypatch.setattr(ack_pg, "usable", lambda using: False)
    settings.SCHEDULER = {**settings.SCHEDULER, "OWNER_CONCURRENCY": 0,
                          "PRIORITY_CLASSES": ""}
    owner = User.objects.db_manager(broker.using).create_user("tenant")
    narrow = ack_queries(broker, owner, 10)
    wide = ack_queries(broker, owner, 200)
    assert wide <= narrow + 2, (narrow, wide)


def test_redis_reads_what_waits_again_once_its_snapshot_is_older_than_heads_fresh_s(pair):
    """The heads read with an ack's bookkeeping serve the next acks for HEADS_FRESH_S
    (runs/brokers/redis/broker.py); past that a more urgent run pushed since is seen."""
    from runs.brokers.redis import broker as redis_broker
    from runs.execution import transitions
    from tests.conftest import make_runs

    broker = pair
    if broker.name != "redis":
        pytest.skip("the database broker reads its rows inside the ack")
    workflow_run = chain(broker, "a", "b", "c")
    first = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    broker.complete([Outcome(lease_first(broker), AttemptOutcome.SUCCEEDED)], first)
    [(b_lease, _)] = first.taken
    [urgent] = make_runs(broker.using, 1, handler="wf.cont", priority=0)
    broker.push(transitions.run_refs(Run.objects.using(broker.using).filter(pk=urgent.pk)))

    time.sleep(redis_broker.HEADS_FRESH_S + 0.05)
    second = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    broker.complete([Outcome(b_lease, AttemptOutcome.SUCCEEDED)], second)

    assert second.taken == []
    assert run_of(broker, workflow_run, "c").state != RunState.RUNNING
    assert lease_first(broker, "w2").run_id == urgent.pk


def test_redis_refreshes_what_waits_with_each_acks_bookkeeping(pair, monkeypatch):
    """The snapshot is renewed in the same pipeline as every ack's forget and adopt, so
    an ack sees a run pushed before the previous ack's bookkeeping even while the
    snapshot is fresh; without that ack in between, it would not (the bound
    HEADS_FRESH_S documents)."""
    from runs.brokers.redis import broker as redis_broker
    from runs.execution import transitions
    from tests.conftest import make_runs

    broker = pair
    if broker.name != "redis":
        pytest.skip("the database broker reads its rows inside the ack")
    monkeypatch.setattr(redis_broker, "HEADS_FRESH_S", 60.0)
    [other] = make_runs(broker.using, 1, handler="wf.cont", queue="other")
    broker.push(transitions.run_refs(Run.objects.using(broker.using).filter(pk=other.pk)))
    broker.promote()
    [other_lease] = broker.lease(["other"], 1, "w1")
    workflow_runs = [chain(broker, "a", "b", "c") for _ in range(2)]

    def ack_a_then_b(between):
        broker._heads = None  # each round starts without a snapshot, as a new worker
        first = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
        broker.complete([Outcome(lease_first(broker), AttemptOutcome.SUCCEEDED)], first)
        [(b_lease, _)] = first.taken
        [urgent] = make_runs(broker.using, 1, handler="wf.cont", priority=0)
        broker.push(transitions.run_refs(Run.objects.using(broker.using).filter(
            pk=urgent.pk)))
        between()
        second = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
        broker.complete([Outcome(b_lease, AttemptOutcome.SUCCEEDED)], second)
        assert lease_first(broker, "w2").run_id == urgent.pk  # the queue's head, leased
        return second.taken

    # Stale on purpose: a's bookkeeping read the heads before the urgent run came.
    assert len(ack_a_then_b(lambda: None)) == 1
    # An ack of another queue's run in between: its bookkeeping reads them again.
    assert ack_a_then_b(lambda: broker.complete(
        [Outcome(other_lease, AttemptOutcome.SUCCEEDED)])) == []
    assert run_of(broker, workflow_runs[1], "c").state != RunState.RUNNING


def test_a_chain_continued_hop_by_hop_leases_from_the_broker_once_not_at_every_hop(
        pair, settings, monkeypatch):
    """Every hop of a chain is continued on the worker and pushes nothing: the broker
    has nothing new, so the worker's idle child must not make a lease at every hop (in
    W7 that lease competed with the hop itself for the 2 cores)."""
    from runs.worker import Worker

    broker = pair
    # The idle child's own poll, long enough not to count on a slow machine.
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKER_POLL_S": 2.0}
    names = [f"n{i}" for i in range(12)]
    workflow_run = chain(broker, *names)
    broker.promote()
    leases = []
    real_lease = type(broker).lease

    def counted(self, *args, **kwargs):
        got = real_lease(self, *args, **kwargs)
        leases.append(len(got))
        return got

    monkeypatch.setattr(type(broker), "lease", counted)
    Worker(["default"], concurrency=2, using=broker.using, burst=True).serve()

    assert WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state == "succeeded"
    continued = Attempt.objects.using(broker.using).filter(
        run__in=[run_of(broker, workflow_run, n).pk for n in names[1:]],
        number=1, worker_id__isnull=False).count()
    assert continued == len(names) - 1
    # The first lease takes n0, an empty one lets the idle child sleep until its poll
    # (WORKER_POLL_S); the chain's 11 hops add none (one each before: 12 or more).
    assert len(leases) <= 5, leases



def nodes_of(*spec):
    """Node dicts from (name, priority) pairs."""
    return [{"name": n, "handler": "wf.cont", "payload": {}, "priority": p} for n, p in spec]


@pytest.mark.parametrize("path", ["one call", "orm"])
def test_an_ack_continues_the_most_urgent_of_the_runs_it_makes_first(pair, settings,
                                                                    monkeypatch, path):
    """root -> lo (priority 9, made first, the lower id) and hi (priority 0), room 1: the
    lease's order takes hi, and so must the continuation (it took the lowest id)."""
    from workflows.execution import ack_pg

    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "PRIORITY_CLASSES": ""}
    if path == "orm":
        monkeypatch.setattr(ack_pg, "usable", lambda using: False)
    workflow = services.create_workflow("fan", nodes_of(("root", 0), ("lo", 9), ("hi", 0)),
                                        [("root", "lo"), ("root", "hi")], using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)

    broker.complete([Outcome(lease_first(broker), AttemptOutcome.SUCCEEDED)], offer)

    lo, hi = run_of(broker, workflow_run, "lo"), run_of(broker, workflow_run, "hi")
    assert lo.pk < hi.pk
    assert [taken.run_id for taken, _ in offer.taken] == [hi.pk]
    assert lease_first(broker, "w2").run_id == lo.pk


def test_one_ack_of_two_chains_with_room_for_one_continues_the_more_urgent(pair, settings):
    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "PRIORITY_CLASSES": ""}
    runs = []
    for name, priority in (("p", 9), ("q", 0)):
        workflow = services.create_workflow(name, nodes_of(("x", priority), ("y", priority)),
                                            [("x", "y")], using=broker.using)
        runs.append(services.start_workflow_run(workflow, using=broker.using))
    broker.promote()
    leases = broker.lease(["default"], 2, "w1")
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)

    broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED) for lease in leases], offer)

    assert [t.run_id for t, _ in offer.taken] == [run_of(broker, runs[1], "y").pk]
    assert run_of(broker, runs[0], "y").state != RunState.RUNNING


def test_no_continuation_past_a_more_urgent_run_the_same_ack_leaves_to_the_broker(
        pair, settings):
    """One ack, two workflows: a tenant's under an owner policy (never continued) at
    priority 0, and an ownerless one at priority 9. The tenant's downstream run is pushed;
    continuing the ownerless one would run priority 9 while that priority 0 waits."""
    from django.contrib.auth.models import User

    from jobs.tenants import set_owner_policy

    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "PRIORITY_CLASSES": "",
                          "OWNER_CONCURRENCY": 0, "OWNER_HIGHEST_PRIORITY": 0}
    tenant = User.objects.db_manager(broker.using).create_user("tenant")
    set_owner_policy(tenant, max_running=5, using=broker.using)
    limited = services.create_workflow("t", nodes_of(("x", 0), ("y", 0)), [("x", "y")],
                                       owner=tenant, using=broker.using)
    free = services.create_workflow("f", nodes_of(("x", 9), ("y", 9)), [("x", "y")],
                                    using=broker.using)
    runs = [services.start_workflow_run(w, using=broker.using) for w in (limited, free)]
    broker.promote()
    leases = broker.lease(["default"], 2, "w1")
    offer = Offer("w1", frozenset({"default"}), room=2, ttl_s=30.0)

    broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED) for lease in leases], offer)

    assert offer.taken == []
    assert lease_first(broker, "w2").run_id == run_of(broker, runs[0], "y").pk


def test_a_more_urgent_retry_whose_backoff_has_passed_is_not_jumped(pair, settings):
    """On Redis a due retry sits in the delayed set until a promotion, which a lease does
    first: what waits is read the same way (runs/brokers/redis/broker.py, _heads_into)."""
    from tests.conftest import make_runs

    broker = pair
    settings.SCHEDULER = {**settings.SCHEDULER, "PRIORITY_CLASSES": ""}
    workflow = services.create_workflow("low", nodes_of(("a", 9), ("b", 9)), [("a", "b")],
                                        using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    lease = lease_first(broker)
    [urgent] = make_runs(broker.using, 1, handler="wf.cont", priority=0)
    broker.push(transitions_refs(broker, urgent))
    [urgent_lease] = broker.lease(["default"], 1, "w3")
    broker.complete([Outcome(urgent_lease, AttemptOutcome.FAILED, error="boom")])
    time.sleep(0.3)  # past its backoff (RETRY_BACKOFF_BASE_S 0.05 s)
    if broker.ready_when_stored:
        # Its ready runs are the rows the dispatcher promoted, for its lease as for this.
        broker.promote()
    else:
        broker._heads = None  # a worker's first ack: no snapshot; the retry not promoted
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)

    broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)], offer)

    assert offer.taken == []
    assert run_of(broker, workflow_run, "b").state != RunState.RUNNING
    broker.promote()
    assert broker.lease(["default"], 1, "w2")[0].run_id == urgent.pk


def transitions_refs(broker, run):
    from runs.execution import transitions

    return transitions.run_refs(Run.objects.using(broker.using).filter(pk=run.pk))


def test_a_worker_with_runs_leased_ahead_offers_no_continuation(pair):
    """A continued run goes first in the worker's line: with runs it leased ahead waiting
    for a child (in the lease's order, maybe more urgent), it would jump them."""
    from runs.worker import Worker
    from runs.worker.lease_ahead import leased_of
    from tests.conftest import make_runs

    broker = pair
    worker = Worker(["default"], concurrency=2, using=broker.using)
    [run] = make_runs(broker.using, 1, handler="wf.cont", priority=0)
    broker.push(transitions_refs(broker, run))
    [lease] = broker.lease(["default"], 1, "w-ahead")
    outcomes = [Outcome(lease, AttemptOutcome.SUCCEEDED)]
    assert worker.acks.offer(outcomes) is not None

    worker.ahead.put_front(leased_of([lease], broker.using))

    assert worker.acks.offer(outcomes) is None
