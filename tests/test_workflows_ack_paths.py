"""The ack of workflow nodes' successes is written twice on purpose: workflows/execution/engine.py
is the rule book (SQLite, acks inside a transaction, starts, resumes, the reconcile, and
every case the one call leaves to it), and workflows/sql/ack_succeeded.sql replays its
common case in one round trip on PostgreSQL (the .sql file's header says why). Here the
same seeded random workflows are played through both, step by step, on twin workflows in
queues of their own, and every row they leave must be the same: node runs, their runs
and attempts, the workflow run, what each ack continued on the worker and what it left
to the broker.

Each seed draws a DAG of three to nine nodes, mostly fan-outs, with mixed priorities
(one seed in three, an owner whose policy limits its runs; the others, random trigger
rules on some nodes), then up to 24 steps,
each after leasing a few of the ready runs (the rest wait in the queue): an ack of one
or more leased nodes with a random room, sometimes by a worker that does not serve the
queue; a node's failure; a pause or a resume; a node's job cancelled (a case the one
call leaves to the engine). The draws depend only on what the twin shows, so both twins
take the same steps while they agree. Continuing runs by id instead of the lease's
order, or dropping either form of the rule of priority, fails it.

A sub-workflow node is played the same way, once with its child succeeding (the nodes
below it run once each, by their trigger rules) and once with a child's node failing
(the node fails and the nodes below go on as below any failed node): the one call leaves
the node's start and the child's end to the engine, and serves the child's other acks.
Letting the one call start the node or end the child, or the engine not settle the
nodes below the node's end, fails it."""

import random

import pytest
from django.contrib.auth.models import User

from jobs.models import Job
from jobs.registry import handler
from jobs.tenants import set_owner_policy
from runs.execution.continuation import Offer
from runs.models import Attempt, AttemptOutcome, Run
from runs.types import Outcome
from workflows import control, services
from workflows.execution import ack_pg, rules
from workflows.models import NodeRun, NodeState, WorkflowNode, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
SEEDS = range(16)
STEPS = 24


@handler("wf.paths")
def noop(ctx, payload):
    return None


@pytest.fixture
def pg_pair(broker, settings):
    if broker.using != "default":
        pytest.skip("the one-call ack is PostgreSQL's; SQLite has the engine's path only")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name, "SHARDS": 8,
                          "PRIORITY_CLASSES": "", "OWNER_CONCURRENCY": 0,
                          "OWNER_HIGHEST_PRIORITY": 0, "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


def twin(broker, seed: int, queue: str):
    """The seed's workflow, made and started in ``queue``; returns its workflow run."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(3, 9))]
    # Mostly trees (one upstream each: fan-outs whose runs outnumber the room), some
    # nodes with a second upstream (fan-ins), some roots.
    edges = []
    ruled = seed % 3 != 0  # some nodes get another trigger rule (below)
    for j, down in enumerate(names[1:], start=1):
        # Rules tell apart only at a fan-in: more of them where rules are drawn.
        ups = rng.sample(names[:j], min(j, 1 + (rng.random() < 0.25)
                                        + (ruled and rng.random() < 0.7)))
        if rng.random() < 0.85:
            edges += [(up, down) for up in sorted(ups)]
    nodes = [{"name": n, "handler": "wf.paths", "payload": {}, "queue": queue,
              "priority": rng.choice([0, 5, 9]), "max_attempts": 1} for n in names]
    # Two seeds in three give some nodes another trigger rule: the one call reads it, and
    # leaves to the engine a node whose rule a success may make fail.
    if ruled:
        for spec in nodes:
            if rng.random() < 0.7:
                spec["trigger_rule"] = rng.choice(rules.RULES[1:])
    owner = None
    if seed % 3 == 0:
        owner = User.objects.db_manager(broker.using).create_user(f"tenant-{queue}")
        set_owner_policy(owner, max_running=50, queues=[queue], using=broker.using)
    workflow = services.create_workflow(f"w{seed}", nodes, edges, owner=owner,
                                        using=broker.using)
    return services.start_workflow_run(workflow, using=broker.using)


def snapshot(broker, workflow_run) -> dict:
    """Every row of ``workflow_run`` an ack writes, by node name, without ids, times and
    the queue (the twins' differ by design)."""
    using = broker.using
    wr = WorkflowRun.objects.using(using).get(pk=workflow_run.pk)
    nodes = {}
    for name, state, error, run_id in (NodeRun.objects.using(using)
                                       .filter(workflow_run=wr).order_by("node__name")
                                       .values_list("node__name", "state", "error", "run_id")):
        run = None
        if run_id is not None:
            run = (Run.objects.using(using).filter(pk=run_id)
                   .values_list("state", "attempt", "worker_id", "priority", "shard",
                                "result", "error").get(),
                   list(Attempt.objects.using(using).filter(run_id=run_id).order_by("number")
                        .values_list("number", "outcome", "worker_id", "result")))
        nodes[name] = (state, error, run)
    return {"workflow run": (wr.state, wr.error), "nodes": nodes}


def play(broker, seed: int, queue: str) -> list:
    """Play the seed's steps on its twin in ``queue``; returns what each step did and the
    snapshot after it."""
    using = broker.using
    workflow_run = twin(broker, seed, queue)
    name_of = dict(NodeRun.objects.using(using).filter(workflow_run=workflow_run)
                   .values_list("node__job_id", "node__name"))
    held = {}  # node name -> its lease, held by this test as a worker would
    rng = random.Random(seed * 7919)
    trace = []

    def hold(lease):
        held[name_of[Run.objects.using(using).get(pk=lease.run_id).job_id]] = lease

    for _ in range(STEPS):
        # Not every ready run is leased: some wait in the queue, for the continuations'
        # rule of priority to weigh against.
        broker.promote()
        for lease in broker.lease([queue], rng.randint(0 if held else 1, 3), "w0"):
            hold(lease)
        state = WorkflowRun.objects.using(using).get(pk=workflow_run.pk).state
        if not held and state not in ("running", "paused"):
            break
        draw = rng.random()
        if draw < 0.1 and held:
            name = rng.choice(sorted(held))
            done = broker.complete([Outcome(held.pop(name), AttemptOutcome.FAILED,
                                            error="boom")])
            step = ("fail", name, done)
        elif draw < 0.2:
            pause = state == "running"
            call = control.pause_workflow_run if pause else control.resume_workflow_run
            step = ("pause" if pause else "resume", call(workflow_run, using=using))
        elif draw < 0.27:
            pending = sorted(NodeRun.objects.using(using).filter(
                workflow_run=workflow_run, state=NodeState.PENDING)
                .values_list("node__name", "node__job_id"))
            if pending:
                name, job_id = rng.choice(pending)
                Job.objects.using(using).filter(pk=job_id).update(status=Job.Status.CANCELLED)
            step = ("cancel a job", name if pending else None)
        elif held:
            count = 1 if rng.random() < 0.7 else rng.randint(1, len(held))
            names = sorted(rng.sample(sorted(held), count))
            served = frozenset({queue if rng.random() < 0.85 else "elsewhere"})
            offer = Offer("w1", served, room=rng.randint(0, 2), ttl_s=30.0)
            accepted = broker.complete(
                [Outcome(held.pop(n), AttemptOutcome.SUCCEEDED, result={"n": n})
                 for n in names], offer)
            for lease, _ in offer.taken:
                hold(lease)
            taken = sorted(name_of[Run.objects.using(using).get(pk=lease.run_id).job_id]
                           for lease, _ in offer.taken)
            step = ("ack", names, accepted, taken, offer.pushed)
        else:
            step = ("nothing held",)
        trace.append((step, snapshot(broker, workflow_run)))
    return trace


@pytest.mark.slow
def test_the_one_call_and_the_engine_leave_the_same_rows(pg_pair, monkeypatch):
    calls = {"served": 0, "left to the engine": 0}
    one_call = ack_pg.ack_successes

    def counted(outcomes, using):
        accepted = one_call(outcomes, using)
        calls["served" if accepted is not None else "left to the engine"] += 1
        return accepted

    for seed in SEEDS:
        with monkeypatch.context() as patch:
            patch.setattr(ack_pg, "ack_successes", counted)
            by_the_call = play(pg_pair, seed, f"a{seed}")
        with monkeypatch.context() as patch:
            patch.setattr(ack_pg, "usable", lambda using: False)
            by_the_engine = play(pg_pair, seed, f"b{seed}")
        for step, (ours, theirs) in enumerate(zip(by_the_call, by_the_engine, strict=True)):
            assert ours == theirs, f"seed {seed}, step {step}"

    # Both kinds of one-call acks happened: the function's own and those it left.
    assert calls["served"] > 20 and calls["left to the engine"] > 0, calls


# --- sub-workflow nodes ----------------------------------------------------------------

# Parent: p_root -> p_sub (runs the child) -> p_after (all_success), p_cleanup (all_done),
# p_rescue (one_failed); p_root -> p_side. Child: c_root -> c_left, c_right. The one call
# leaves the sub node's start and the child's end to the engine and serves the rest.
BELOW_SUB = {"p_after": "all_success", "p_cleanup": "all_done", "p_rescue": "one_failed"}


def sub_twin(broker, queue: str):
    """The sub-workflow scenario's child and parent, made in ``queue``, the parent
    started; returns its workflow run."""
    using = broker.using

    def node(name, priority=5, **extra):
        return {"name": name, "handler": "wf.paths", "payload": {}, "queue": queue,
                "priority": priority, "max_attempts": 1, **extra}

    child = services.create_workflow(
        f"child {queue}", [node("c_root"), node("c_left", 9), node("c_right", 0)],
        [("c_root", "c_left"), ("c_root", "c_right")], using=using)
    nodes = [node("p_root"), {"name": "p_sub", "workflow": child.pk}, node("p_side", 9),
             *(node(name, trigger_rule=rule) for name, rule in BELOW_SUB.items())]
    edges = [("p_root", "p_sub"), ("p_root", "p_side"),
             *(("p_sub", name) for name in BELOW_SUB)]
    parent = services.create_workflow(f"parent {queue}", nodes, edges, using=using)
    return services.start_workflow_run(parent, using=using)


def sub_snapshot(broker, workflow_run) -> dict:
    """snapshot() of the parent and, once started, of its child; the child's id, which
    the sub node's error names and the twins' differ in, written as ``<child>``."""
    child_id = (NodeRun.objects.using(broker.using)
                .filter(workflow_run=workflow_run, child_run_id__isnull=False)
                .values_list("child_run_id", flat=True).first())
    parent = snapshot(broker, workflow_run)
    if child_id is None:
        return {"parent": parent, "child": None}
    state, error, run = parent["nodes"]["p_sub"]
    parent["nodes"]["p_sub"] = (state, error.replace(f"run {child_id} ", "run <child> "), run)
    return {"parent": parent, "child": snapshot(broker, WorkflowRun(pk=child_id))}


def play_sub(broker, doomed: str | None, queue: str) -> tuple[list, WorkflowRun]:
    """Play the sub-workflow scenario in ``queue`` to its end: lease a few ready runs,
    ack them with a random room (node ``doomed``, if given, fails instead); returns what
    each step did with the snapshot after it, and the parent's workflow run."""
    using = broker.using
    workflow_run = sub_twin(broker, queue)
    name_of = dict(WorkflowNode.objects.using(using).filter(job__queue=queue)
                   .values_list("job_id", "name"))
    held = {}
    rng = random.Random(len(queue))
    trace = []

    def hold(lease):
        held[name_of[Run.objects.using(using).get(pk=lease.run_id).job_id]] = lease

    for _ in range(STEPS):
        broker.promote()
        for lease in broker.lease([queue], rng.randint(1, 3), "w0"):
            hold(lease)
        if not held:
            break
        names = sorted(rng.sample(sorted(held), 1 if rng.random() < 0.6 else len(held)))
        if doomed in names:
            done = broker.complete([Outcome(held.pop(doomed), AttemptOutcome.FAILED,
                                            error="boom")])
            step = ("fail", doomed, done)
        else:
            offer = Offer("w1", frozenset({queue}), room=rng.randint(0, 2), ttl_s=30.0)
            accepted = broker.complete(
                [Outcome(held.pop(n), AttemptOutcome.SUCCEEDED, result={"n": n})
                 for n in names], offer)
            for lease, _ in offer.taken:
                hold(lease)
            step = ("ack", names, accepted, len(offer.taken), offer.pushed)
        trace.append((step, sub_snapshot(broker, workflow_run)))
    return trace, workflow_run


@pytest.mark.parametrize("doomed", [None, "c_right"], ids=["child succeeds", "child fails"])
def test_a_sub_workflow_node_ends_the_same_on_both_paths(pg_pair, monkeypatch, doomed):
    calls = {"served": 0, "left to the engine": 0}
    one_call = ack_pg.ack_successes

    def counted(outcomes, using):
        accepted = one_call(outcomes, using)
        calls["served" if accepted is not None else "left to the engine"] += 1
        return accepted

    with monkeypatch.context() as patch:
        patch.setattr(ack_pg, "ack_successes", counted)
        by_the_call, workflow_run = play_sub(pg_pair, doomed, "sub-a")
    with monkeypatch.context() as patch:
        patch.setattr(ack_pg, "usable", lambda using: False)
        by_the_engine, _ = play_sub(pg_pair, doomed, "sub-b")
    for step, (ours, theirs) in enumerate(zip(by_the_call, by_the_engine, strict=True)):
        assert ours == theirs, f"step {step}"

    end = by_the_call[-1][1]
    nodes = {name: node[0] for name, node in end["parent"]["nodes"].items()}
    runs = {name: node[2] for name, node in end["parent"]["nodes"].items()}
    if doomed is None:
        assert end["child"]["workflow run"] == ("succeeded", "")
        assert end["parent"]["workflow run"] == ("succeeded", "")
        assert nodes == {"p_root": "succeeded", "p_sub": "succeeded", "p_side": "succeeded",
                         "p_after": "succeeded", "p_cleanup": "succeeded",
                         "p_rescue": "skipped"}
    else:
        assert end["child"]["workflow run"][0] == "failed"
        assert end["parent"]["workflow run"][0] == "failed"
        assert nodes == {"p_root": "succeeded", "p_sub": "failed", "p_side": "succeeded",
                         "p_after": "upstream_failed", "p_cleanup": "succeeded",
                         "p_rescue": "succeeded"}
        assert end["parent"]["nodes"]["p_sub"][1].startswith(
            "its workflow run <child> failed: "), end["parent"]["nodes"]["p_sub"]
    # The sub node has no run of its own; each node below that ran, ran once.
    assert runs["p_sub"] is None
    for name in ("p_after", "p_cleanup", "p_rescue"):
        made = Run.objects.using(pg_pair.using).filter(
            job_id=NodeRun.objects.using(pg_pair.using).get(
                workflow_run=workflow_run, node__name=name).node.job_id).count()
        assert made == (nodes[name] == "succeeded"), (name, made)
    # The one call served the child's inner acks and left to the engine the sub node's
    # start and, when it succeeds, the child's end.
    assert calls["served"] > 0, calls
    assert calls["left to the engine"] >= (2 if doomed is None else 1), calls
